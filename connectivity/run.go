package connectivity

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Options of a run.
type Options struct {
	Image string
	// CheckTimeout bounds one check: its pod's start, the probe, its end.
	CheckTimeout time.Duration
	// RetryFor: a probe retries until its expected outcome for this long
	// (a policy takes a moment to apply, a Service's rules too).
	RetryFor time.Duration
	// Log gets a line per step (may be nil).
	Log io.Writer
}

type runner struct {
	cs      kubernetes.Interface
	opt     Options
	ns      string
	nodes   []node
	env     Env
	targets map[Target]string
	seq     int
	mu      sync.Mutex
}

// Run makes a namespace, runs every check and deletes the namespace,
// also when ctx ends first (the report says Interrupted then). The
// error is for what kept the run from checking at all.
func Run(ctx context.Context, cs kubernetes.Interface, opt Options) (rep *Report, err error) {
	start := time.Now()
	r := &runner{cs: cs, opt: opt}
	rep = &Report{}
	if r.nodes, err = pickNodes(ctx, cs); err != nil {
		return nil, err
	}
	for _, n := range r.nodes {
		rep.Nodes = append(rep.Nodes, n.Name)
	}
	rep.Network, r.env = detectNetwork(ctx, cs)
	dns, err := hasDNS(ctx, cs)
	if err != nil {
		return nil, fmt.Errorf("look for the DNS Service kube-system/kube-dns: %w", err)
	}
	checks := Plan(Cluster{Nodes: len(r.nodes), DNS: dns})
	rep.Notes = notes(r.env, len(r.nodes))
	if old, err := Leftovers(ctx, cs); err == nil && len(old) > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("namespaces of other runs, running or killed: %s (when none is running, 'podnet connectivity cleanup' deletes them)", strings.Join(old, ", ")))
	}
	if r.ns, err = r.makeNamespace(ctx); err != nil {
		return nil, err
	}
	rep.Namespace = r.ns
	defer func() {
		r.logf("deleting namespace %s", r.ns)
		if derr := DeleteNamespace(cs, r.ns, 2*time.Minute); derr != nil {
			err = errors.Join(err, derr)
		}
		rep.Millis = time.Since(start).Milliseconds()
	}()
	if err := r.setUp(ctx); err != nil {
		rep.Interrupted = ctx.Err() != nil
		return rep, err
	}
	r.runPhases(ctx, checks, rep)
	rep.Interrupted = ctx.Err() != nil
	return rep, nil
}

func notes(env Env, nodes int) []string {
	var out []string
	if !env.PolicyEnforced {
		out = append(out, "NetworkPolicy checks are judged only when a policy blocks: "+env.PolicyUnknown)
	}
	if !env.HostPorts {
		out = append(out, "hostPort is judged only when it works: host ports are an optional CNI feature")
	}
	if nodes < 2 {
		out = append(out, "one usable node: the checks across nodes do not run")
	}
	return out
}

func (r *runner) logf(format string, args ...any) {
	if r.opt.Log != nil {
		fmt.Fprintf(r.opt.Log, "connectivity: "+format+"\n", args...)
	}
}

func (r *runner) makeNamespace(ctx context.Context) (string, error) {
	for range 5 {
		n, err := rand.Int(rand.Reader, big.NewInt(1<<30))
		if err != nil {
			return "", err
		}
		name := NamespacePrefix + strconv.FormatInt(n.Int64(), 36)
		_, err = r.cs.CoreV1().Namespaces().Create(ctx, namespace(name), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("create namespace %s: %w", name, err)
		}
		r.logf("namespace %s, nodes %v", name, r.nodeNames())
		return name, nil
	}
	return "", errors.New("create namespace: five random names taken")
}

func (r *runner) nodeNames() []string {
	var out []string
	for _, n := range r.nodes {
		out = append(out, n.Name)
	}
	return out
}

// other is the server's node for checks across nodes (the client's
// own when there is one node).
func (r *runner) other() node { return r.nodes[len(r.nodes)-1] }

// setUp starts the servers and the Service and resolves the targets.
func (r *runner) setUp(ctx context.Context) error {
	n, err := rand.Int(rand.Reader, big.NewInt(10000))
	if err != nil {
		return err
	}
	hostPort := int32(20000 + n.Int64())
	pods := r.cs.CoreV1().Pods(r.ns)
	for _, p := range []*corev1.Pod{serverPod(ServerSame, r.nodes[0].Name, r.opt.Image, 0), serverPod(ServerCross, r.other().Name, r.opt.Image, hostPort)} {
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create pod %s: %w", p.Name, err)
		}
	}
	svc, err := r.cs.CoreV1().Services(r.ns).Create(ctx, service(), metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create Service %s: %w", ServiceName, err)
	}
	r.logf("waiting for the servers to be ready")
	same, err := r.waitReady(ctx, ServerSame)
	if err != nil {
		return err
	}
	cross, err := r.waitReady(ctx, ServerCross)
	if err != nil {
		return err
	}
	r.env.ClusterIP = svc.Spec.ClusterIP
	hp := func(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }
	r.targets = map[Target]string{
		TargetServerSame:  same.Status.PodIP,
		TargetServerCross: cross.Status.PodIP,
		TargetClusterIP:   hp(svc.Spec.ClusterIP, 80),
		TargetNodePort:    hp(r.other().Addr, int(svc.Spec.Ports[0].NodePort)),
		TargetHostPort:    hp(r.other().Addr, int(hostPort)),
		TargetDNSName:     ServiceName + "." + r.ns + ".svc",
		TargetNodeOwn:     r.nodes[0].kubeletAddr(),
		TargetNodeOther:   r.other().kubeletAddr(),
	}
	return nil
}

func (r *runner) waitReady(ctx context.Context, name string) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*r.opt.CheckTimeout)
	defer cancel()
	for {
		p, err := r.cs.CoreV1().Pods(r.ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && p.Status.PodIP != "" && podReady(p) {
			return p, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("server pod %s not ready after %s: %s", name, 2*r.opt.CheckTimeout, podState(p, err))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podState says in a few words why a pod is not where it should be.
func podState(p *corev1.Pod, err error) string {
	if err != nil {
		return err.Error()
	}
	var why []string
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			why = append(why, w.Reason+": "+w.Message)
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" && !slices.Contains(why, c.Message) {
			why = append(why, c.Message)
		}
	}
	return string(p.Status.Phase) + " " + strings.Join(why, "; ")
}

// parseProbe reads the last JSON line of a prober's log.
func parseProbe(log []byte) (ProbeResult, error) {
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		var p ProbeResult
		if strings.HasPrefix(lines[i], "{") && json.Unmarshal([]byte(lines[i]), &p) == nil {
			return p, nil
		}
	}
	return ProbeResult{}, fmt.Errorf("no result in the prober's log: %q", strings.TrimSpace(string(log)))
}
