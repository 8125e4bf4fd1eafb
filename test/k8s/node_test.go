package k8s_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/test/k8s/cluster"
)

func TestMain(m *testing.M) {
	cluster.MaybeRunEtcd()
	cluster.MaybeRunReaper()
	os.Exit(m.Run())
}

// shippedPool is the pod range of every variant: the default's
// cluster_cidr (each node's podCIDR is a /24 of it) and the etcd
// variant's pool.
var shippedPool = netip.MustParsePrefix(cluster.ClusterCIDR)

const diagPort = 8080

// TestNode brings up one node, deploys podnet from deploy/kubernetes, the
// default a new user applies (the Kubernetes datastore, pods addressed
// from the Node's podCIDR), and checks the pod network through the API. The steps depend on each other
// and run in order; the first that fails ends the test.
func TestNode(t *testing.T) {
	c := cluster.Start(t)
	node := c.Nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	step := steps(t)

	step("NetworkNotReadyBeforePodnet", func(t *testing.T) {
		// kubelet reports the runtime's network status with its first
		// node status updates; give it a few.
		var last string
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			n, err := node.Object(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ready := readyCondition(n)
			if ready != nil {
				last = fmt.Sprintf("%s %s: %s", ready.Status, ready.Reason, ready.Message)
				if ready.Status == corev1.ConditionTrue {
					t.Fatalf("node Ready before any CNI config was installed: %s", last)
				}
				if strings.Contains(ready.Message, "NetworkPluginNotReady") &&
					(strings.Contains(ready.Message, "cni plugin not initialized") || strings.Contains(ready.Message, "cni config uninitialized")) {
					t.Logf("node not ready, as expected: %s", ready.Message)
					return
				}
			}
			time.Sleep(time.Second)
		}
		t.Fatalf("node never reported the network not ready; last Ready condition: %s", last)
	})

	start := time.Now()
	if err := c.Deploy(ctx, cluster.Default, nil); err != nil {
		t.Fatal(err)
	}

	step("ReadyWithoutRestart", func(t *testing.T) {
		pids := c.PIDs()
		var last string
		for {
			n, err := node.Object(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if r := readyCondition(n); r != nil {
				last = fmt.Sprintf("%s %s: %s", r.Status, r.Reason, r.Message)
				if r.Status == corev1.ConditionTrue {
					break
				}
			}
			if time.Since(start) > 3*time.Minute {
				t.Fatalf("node not Ready 3m after podnet was applied: %s", last)
			}
			time.Sleep(500 * time.Millisecond)
		}
		t.Logf("node Ready %s after podnet was applied", time.Since(start).Round(100*time.Millisecond))
		for name, pid := range c.PIDs() {
			if pids[name] != pid {
				t.Errorf("%s restarted (pid %d, was %d)", name, pid, pids[name])
			}
		}
		if _, err := os.Stat(node.CNIConfDir + "/10-podnet.conflist"); err != nil {
			t.Errorf("the agent installed no config: %v", err)
		}
	})

	// The Node's podCIDR is the node's pool; the agent installed the
	// config that says so only once it was known.
	pool := shippedPool
	step("ConfigFromPodCIDR", func(t *testing.T) {
		pool = checkNodeCIDRNode(ctx, t, c, node)[0]
	})

	var a, b *corev1.Pod
	step("PodsGetPoolAddresses", func(t *testing.T) {
		for _, name := range []string{"diag-a", "diag-b"} {
			if _, err := c.Client.CoreV1().Pods("default").Create(ctx, diagPod(name, "serve", "--listen", fmt.Sprintf(":%d", diagPort)), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		a = waitPod(ctx, t, c, "diag-a", corev1.PodRunning)
		b = waitPod(ctx, t, c, "diag-b", corev1.PodRunning)
		seen := map[netip.Addr]string{}
		for _, p := range []*corev1.Pod{a, b} {
			if len(p.Status.PodIPs) != 1 {
				t.Fatalf("pod %s: status.podIPs %v, want one address", p.Name, p.Status.PodIPs)
			}
			ip, err := netip.ParseAddr(p.Status.PodIPs[0].IP)
			if err != nil || !pool.Contains(ip) {
				t.Fatalf("pod %s: address %q not in the node's pool %s", p.Name, p.Status.PodIPs[0].IP, pool)
			}
			if other, dup := seen[ip]; dup {
				t.Fatalf("pods %s and %s both have %s", other, p.Name, ip)
			}
			seen[ip] = p.Name
			t.Logf("pod %s: %s", p.Name, ip)
		}
	})

	step("PodToPod", func(t *testing.T) {
		url := fmt.Sprintf("http://%s:%d/", a.Status.PodIP, diagPort)
		if _, err := c.Client.CoreV1().Pods("default").Create(ctx, diagPod("diag-client", "get", "--timeout", "10s", url), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cl := waitPod(ctx, t, c, "diag-client", corev1.PodSucceeded)
		body, err := c.Client.CoreV1().Pods("default").GetLogs("diag-client", &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			t.Fatalf("logs of diag-client: %v", err)
		}
		// The server names the address the request came from: the
		// client pod's own, as pod to pod is never masqueraded.
		if !strings.Contains(string(body), "to "+cl.Status.PodIP+":") {
			t.Fatalf("diag-client got %q; want the answer to its own address %s", body, cl.Status.PodIP)
		}
		t.Logf("diag-client: %s", strings.TrimSpace(string(body)))
	})

	step("NodeToPod", func(t *testing.T) {
		hc := node.HTTPClient(5 * time.Second)
		for _, p := range []*corev1.Pod{a, b} {
			resp, err := hc.Get(fmt.Sprintf("http://%s:%d/", p.Status.PodIP, diagPort))
			if err != nil {
				t.Fatalf("node to pod %s: %v", p.Name, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(body), "hello from") {
				t.Fatalf("node to pod %s: %q", p.Name, body)
			}
		}
	})

	step("EgressMasqueraded", func(t *testing.T) { egressMasqueraded(ctx, t, c) })

	step("HostPort", func(t *testing.T) { hostPort(ctx, t, c) })

	step("LogTailsNameTheAgent", func(t *testing.T) {
		// What a failure prints: kubelet's, containerd's and the agent's
		// container log.
		tails := c.LogTails(5)
		for _, want := range []string{"--- containerd (", "--- kubelet (", "/agent/0.log:", "agent ready"} {
			if !strings.Contains(tails, want) {
				t.Errorf("log tails lack %q:\n%s", want, tails)
			}
		}
	})

	step("DeletedPodsLeaveNothing", func(t *testing.T) {
		var pods []*corev1.Pod
		for _, name := range []string{"diag-a", "diag-b", "diag-client", "diag-egress", "diag-hp", "diag-hp-client"} {
			p, err := c.Client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			pods = append(pods, p)
		}
		deletedPodsLeaveNothing(ctx, t, c, node, sandboxLog{}, pods)
	})
}

func readyCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// diagPod runs `podnet diag ARGS` from podnet's own image.
func diagPod(name string, args ...string) *corev1.Pod {
	no := false
	grace := int64(2)
	restart := corev1.RestartPolicyAlways
	if args[0] == "get" {
		restart = corev1.RestartPolicyNever
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "podnet-diag"}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  &no,
			TerminationGracePeriodSeconds: &grace,
			RestartPolicy:                 restart,
			Containers: []corev1.Container{{
				Name:            "diag",
				Image:           cluster.PodnetImage,
				ImagePullPolicy: corev1.PullNever,
				Command:         append([]string{"/opt/podnet/bin/podnet", "diag"}, args...),
			}},
		},
	}
}

// waitPod waits for the pod to reach phase and returns it.
func waitPod(ctx context.Context, t *testing.T, c *cluster.Cluster, name string, phase corev1.PodPhase) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var last string
	for time.Now().Before(deadline) {
		p, err := c.Client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase == phase {
			return p
		}
		if p.Status.Phase == corev1.PodFailed || (phase == corev1.PodRunning && p.Status.Phase == corev1.PodSucceeded) {
			t.Fatalf("pod %s ended %s: %s", name, p.Status.Phase, podSummary(p))
		}
		last = podSummary(p)
		time.Sleep(500 * time.Millisecond)
	}
	events, _ := c.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	var ev []string
	if events != nil {
		for _, e := range events.Items {
			ev = append(ev, e.Reason+": "+e.Message)
		}
	}
	t.Fatalf("pod %s not %s after 2m: %s; events: %s", name, phase, last, strings.Join(ev, " | "))
	return nil
}

func podSummary(p *corev1.Pod) string {
	s := fmt.Sprintf("phase %s", p.Status.Phase)
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			s += fmt.Sprintf("; %s waiting: %s %s", cs.Name, w.Reason, w.Message)
		}
		if x := cs.State.Terminated; x != nil {
			s += fmt.Sprintf("; %s exited %d: %s %s", cs.Name, x.ExitCode, x.Reason, x.Message)
		}
	}
	return s
}

// egressMasqueraded runs a pod on the first node that fetches from a
// server on the far end of the node's uplink, outside the pool: the server
// must see the node's address, not the pod's.
func egressMasqueraded(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	var ln net.Listener
	err := netns.Do(netns.NamedPath(c.OutsideNetNS), func() error {
		var err error
		ln, err = net.Listen("tcp", "198.18.0.254:0")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	from := make(chan string, 1)
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case from <- r.RemoteAddr:
		default:
		}
		fmt.Fprintln(w, "outside")
	})}
	go srv.Serve(ln)
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/"
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, onNode(c.Nodes[0], diagPod("diag-egress", "get", "--timeout", "10s", url)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(ctx, t, c, "diag-egress", corev1.PodSucceeded)
	got := <-from
	if host, _, _ := net.SplitHostPort(got); host != c.Nodes[0].IP {
		t.Fatalf("outside server saw %s; want the node's address %s (masquerade)", got, c.Nodes[0].IP)
	}
	t.Logf("outside server saw %s", got)
}
