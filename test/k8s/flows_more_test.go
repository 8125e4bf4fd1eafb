package k8s_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podnet/podnet/deploy/grafana"
	"github.com/podnet/podnet/flows"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// thousandConns is the judge's count of short connections.
const thousandConns = 1000

// thousand makes 1,000 short TCP connections from fl-c1 to fl-s2 (across
// nodes) and counts, on each node, the Start records of them with the
// right verdict: at least 99 % each.
func (w *flowWorld) thousand(ctx context.Context, t *testing.T) {
	t.Helper()
	c1, s2 := w.pods["fl-c1"], w.pods["fl-s2"]
	from := 42000
	cpu0 := agentCPU(ctx, t, w.c)
	start := time.Now()
	failed := 0
	for i := range thousandConns {
		if err := tcpDial(c1, s2.ip, from+i); err != nil {
			failed++
		}
	}
	took := time.Since(start)
	if failed > thousandConns/100 {
		t.Fatalf("%d of %d connections failed", failed, thousandConns)
	}
	want := thousandConns - failed
	var counts map[string]int
	var lastErr error
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		counts, lastErr = w.countThousand(ctx, from)
		if lastErr == nil && counts[c1.node] >= want && counts[s2.node] >= want {
			break
		}
		time.Sleep(2 * time.Second)
	}
	if lastErr != nil {
		t.Fatal(lastErr)
	}
	// The connections' ends (conntrack's destroy, 10 s after the reset)
	// are part of their cost.
	time.Sleep(15 * time.Second)
	cpu1 := agentCPU(ctx, t, w.c)
	for n := range cpu1 {
		t.Logf("TestFlows figures: agent on %s: %.0f ms of CPU for the %d connections' records and everything else it did in those %s (process_cpu_seconds_total): %.1f %% of a core at 1,000 new connections a second",
			n, 1000*(cpu1[n]-cpu0[n]), thousandConns, (time.Since(start)).Round(time.Second), 100*(cpu1[n]-cpu0[n])*1000/thousandConns)
	}
	t.Logf("TestFlows figures: %d short connections fl-c1 -> fl-s2 in %s (%d failed); recorded as forwarded: %s %d (%.1f %%), %s %d (%.1f %%)",
		thousandConns, took.Round(time.Millisecond), failed, c1.node, counts[c1.node], pct(counts[c1.node], want), s2.node, counts[s2.node], pct(counts[s2.node], want))
	for _, n := range []string{c1.node, s2.node} {
		if pct(counts[n], want) < 99 {
			t.Errorf("%s recorded %d of %d connections (%.1f %%), want >= 99 %%", n, counts[n], want, pct(counts[n], want))
		}
	}
}

func pct(n, of int) float64 { return 100 * float64(n) / float64(of) }

// countThousand counts, by node, the distinct source ports of forwarded
// Start records of the 1,000 connections.
func (w *flowWorld) countThousand(ctx context.Context, from int) (map[string]int, error) {
	recs, err := w.flowsJSON(ctx, "--pod", "default/fl-c1", "--verdict", "forwarded", "--port", fmt.Sprint(flowServerPort), "--limit", "8000")
	if err != nil {
		return nil, err
	}
	s2 := w.pods["fl-s2"].ip
	seen := map[string]map[uint16]bool{}
	for _, r := range recs {
		if r.Event != flows.Start || r.Dst.IP != s2 || int(r.Src.Port) < from || int(r.Src.Port) >= from+thousandConns {
			continue
		}
		if seen[r.Node] == nil {
			seen[r.Node] = map[uint16]bool{}
		}
		seen[r.Node][r.Src.Port] = true
	}
	counts := map[string]int{}
	for n, ports := range seen {
		counts[n] = len(ports)
	}
	return counts, nil
}

// badInput: a namespace that does not exist answers empty (exit 0); a
// verdict that does not exist is an error naming the flag.
func (w *flowWorld) badInput(ctx context.Context, t *testing.T) {
	t.Helper()
	recs, err := w.flowsJSON(ctx, "--namespace", "no-such-namespace")
	if err != nil || len(recs) != 0 {
		t.Errorf("podnet flows --namespace no-such-namespace: %d records, %v; want none and exit 0", len(recs), err)
	}
	out, err := w.c.Nodes[0].Podnet(ctx, "flows", "--kubeconfig", w.kc, "--verdict", "sideways")
	if err == nil || !strings.Contains(string(out), "sideways") {
		t.Errorf("podnet flows --verdict sideways: %v: %s; want an error naming the value", err, out)
	}
}

// follow runs `podnet flows --follow` for fl-c2 through the API server's
// pod proxy, makes a new connection of fl-c2's and waits for its record
// on the stream, then interrupts the command, which must end cleanly.
func (w *flowWorld) follow(ctx context.Context, t *testing.T) {
	t.Helper()
	fctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := w.c.Nodes[0].PodnetCommand(fctx, "flows", "--kubeconfig", w.kc, "-o", "json", "--follow", "--limit", "0", "--pod", "default/fl-c2")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan flows.Record, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var r flows.Record
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				lines <- r
			}
		}
	}()
	time.Sleep(3 * time.Second) // the followers subscribed on both agents
	const sport = 43001
	start := time.Now()
	_, _ = udpSend(w.pods["fl-c2"], w.pods["fl-s1"].ip, sport, 200*time.Millisecond)
	var got bool
	timeout := time.After(30 * time.Second)
	for !got {
		select {
		case r, ok := <-lines:
			if !ok {
				t.Fatalf("podnet flows --follow ended: %s", stderr.String())
			}
			got = r.Src.Port == sport && r.Verdict == flows.DroppedPolicy
		case <-timeout:
			t.Fatalf("podnet flows --follow: no record of fl-c2's datagram after 30 s; stderr: %s", stderr.String())
		}
	}
	t.Logf("TestFlows figures: a dropped datagram on the --follow stream %s after it was sent", time.Since(start).Round(time.Millisecond))
	_ = cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("podnet flows --follow after SIGINT: %v: %s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Errorf("podnet flows --follow still running 10 s after SIGINT")
	}
}

// dashboardNotOn are the dashboard's panels whose metrics the shipped
// deployment does not export, with why; every other panel's metrics
// must be exported by the agents of TestFlows's cluster.
var dashboardNotOn = map[string]string{
	"WireGuard/WireGuard implementation": "encryption none as shipped (TestWireGuard judges the row)",
	"WireGuard/WireGuard peers":          "encryption none as shipped (TestWireGuard judges the row)",
	"NetworkPolicy/Deny log":             "the deny log is off as shipped (--policy-deny-log)",
}

// checkDashboard scrapes every agent's /metrics through the API server's
// pod proxy and fails naming each panel of deploy/grafana's dashboard
// that queries a metric none of them exports; keep picks the panels.
func checkDashboard(ctx context.Context, t *testing.T, c *cluster.Cluster, keep func(panel string) bool) {
	t.Helper()
	d, err := grafana.Parse(grafana.JSON)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=podnet"})
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, p := range pods.Items {
		b, err := c.Client.CoreV1().Pods(p.Namespace).ProxyGet("http", p.Name, "9603", "/metrics", nil).DoRaw(ctx)
		if err != nil {
			t.Fatalf("agent %s /metrics: %v", p.Name, err)
		}
		for m := range grafana.MetricNames(string(b)) {
			exported[m] = true
		}
	}
	miss := d.Missing(exported, keep)
	for _, panel := range grafana.SortedKeys(miss) {
		t.Errorf("dashboard panel %q queries %v, which no agent of %d exports", panel, miss[panel], len(pods.Items))
	}
	t.Logf("dashboard: %d panels checked against %d agents' metrics", len(d.Metrics())-len(dashboardNotOn), len(pods.Items))
}

// agentCPU reads every agent's process_cpu_seconds_total through the API
// server's pod proxy, by node.
func agentCPU(ctx context.Context, t *testing.T, c *cluster.Cluster) map[string]float64 {
	t.Helper()
	pods, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=podnet"})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, p := range pods.Items {
		b, err := c.Client.CoreV1().Pods(p.Namespace).ProxyGet("http", p.Name, "9603", "/metrics", nil).DoRaw(ctx)
		if err != nil {
			t.Fatalf("agent %s /metrics: %v", p.Name, err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "process_cpu_seconds_total "); ok {
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					out[p.Spec.NodeName] = f
				}
			}
		}
	}
	return out
}
