package connectivity

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// runPhases runs the checks phase by phase, each phase's at once, and
// adds the results in plan order.
func (r *runner) runPhases(ctx context.Context, checks []Check, rep *Report) {
	results := make([]Result, len(checks))
	done := make([]bool, len(checks))
	for _, ph := range Phases(checks) {
		if ctx.Err() != nil {
			break
		}
		if err := r.applyPolicies(ctx, ph); err != nil {
			for i, c := range checks {
				if c.Phase == ph && c.NotRun == "" {
					results[i], done[i] = Failed(c, err), true
				}
			}
			continue
		}
		var wg sync.WaitGroup
		for i, c := range checks {
			if c.Phase != ph || c.NotRun != "" {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], done[i] = r.runCheck(ctx, c), true
			}()
		}
		wg.Wait()
	}
	for i, c := range checks {
		switch {
		case c.NotRun != "":
			results[i] = Skipped(c)
		case ctx.Err() != nil && (!done[i] || results[i].Status == Fail):
			// Cut short by the interruption, not failed by the network.
			results[i] = Result{Check: c.Name, Status: NotRun, Detail: "interrupted"}
		}
	}
	Qualify(checks, results)
	for _, res := range results {
		rep.Add(res)
	}
}

var runPolicies = []string{"deny-ingress", "allow-client", "deny-egress"}

// applyPolicies leaves exactly the phase's policies in the namespace.
func (r *runner) applyPolicies(ctx context.Context, ph Phase) error {
	want := map[string]bool{}
	api := r.cs.NetworkingV1().NetworkPolicies(r.ns)
	for _, p := range policies(ph) {
		want[p.Name] = true
		_, err := api.Create(ctx, p, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create NetworkPolicy %s: %w", p.Name, err)
		}
	}
	for _, name := range runPolicies {
		if want[name] {
			continue
		}
		if err := api.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete NetworkPolicy %s: %w", name, err)
		}
	}
	return nil
}

// runCheck runs one prober pod and judges its result.
func (r *runner) runCheck(ctx context.Context, c Check) Result {
	start := time.Now()
	res := r.probe(ctx, c)
	res.Duration = time.Since(start)
	r.logf("%-50s %s", c.Name, res.Status)
	return res
}

func (r *runner) probe(ctx context.Context, c Check) Result {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, r.opt.CheckTimeout)
	defer cancel()
	r.mu.Lock()
	r.seq++
	name := fmt.Sprintf("probe-%02d-%s", r.seq, c.Role)
	r.mu.Unlock()
	pods := r.cs.CoreV1().Pods(r.ns)
	args := probeArgs(c.Kind, r.address(c), c.Blocked, r.opt.RetryFor)
	if _, err := pods.Create(ctx, proberPod(name, r.nodes[0].Name, r.opt.Image, c.Role, args), metav1.CreateOptions{}); err != nil {
		return Failed(c, fmt.Errorf("create prober pod %s: %w", name, err))
	}
	var p *corev1.Pod
	var err error
	for {
		p, err = pods.Get(ctx, name, metav1.GetOptions{})
		if err == nil && (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed) {
			break
		}
		select {
		case <-ctx.Done():
			return Failed(c, fmt.Errorf("prober pod %s not done after %s: %s", name, time.Since(start).Round(time.Second), podState(p, err)))
		case <-time.After(500 * time.Millisecond):
		}
	}
	log, err := pods.GetLogs(name, &corev1.PodLogOptions{Container: "podnet"}).DoRaw(ctx)
	if err != nil {
		return Failed(c, fmt.Errorf("log of prober pod %s: %w", name, err))
	}
	pr, err := parseProbe(log)
	if err != nil {
		return Failed(c, fmt.Errorf("prober pod %s: %w", name, err))
	}
	return Judge(c, pr, r.env)
}

// address is a check's target as its probe takes it: the servers'
// pod addresses get the port of the probe's protocol.
func (r *runner) address(c Check) string {
	a := r.targets[c.Target]
	if c.Target != TargetServerSame && c.Target != TargetServerCross {
		return a
	}
	port := httpPort
	if c.Kind == KindUDP {
		port = udpPort
	}
	return net.JoinHostPort(a, strconv.Itoa(port))
}
