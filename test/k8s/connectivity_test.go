package k8s_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podnet/podnet/connectivity"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// TestConnectivity runs the real `podnet connectivity test` (the
// cluster's own podnet binary, with --kubeconfig and the harness's image)
// against two nodes with podnet and CoreDNS under kube-proxy: it passes;
// with podnet's route on the client's node to the other node's pods
// covered by a blackhole of another tool's (the agent puts back a route
// of its own deleted by hand at once, and leaves one it does not own
// alone) it fails and names the checks across nodes; with a NetworkPolicy that
// blocks the client's DNS it fails and names the DNS check; sent SIGINT
// mid-run it stops with a non-zero status. No namespace of a run is left
// after any of them. PODNET_CONNECTIVITY_VARIANT=blocks or etcd runs the
// passing case against that deployment; refchain runs it against the
// reference plugins instead of podnet (referenceChain).
func TestConnectivity(t *testing.T) {
	variant := cluster.Default
	if v := os.Getenv("PODNET_CONNECTIVITY_VARIANT"); v != "" && v != "default" {
		variant = cluster.Variant(v)
	}
	c := cluster.Start(t, cluster.WithNodes(2))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	// refchain: the reference plugins, not podnet, where nothing
	// enforces NetworkPolicy: the policy checks must say "not judged".
	refchain := variant == "refchain"
	var err error
	if refchain {
		err = c.InstallReferenceChain(ctx, t.Logf)
	} else {
		err = c.Deploy(ctx, variant, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		waitNodeReady(ctx, t, c, n.Name, 3*time.Minute)
	}
	if err := c.DeployDNS(ctx); err != nil {
		t.Fatal(err)
	}
	step := steps(t)
	// The command puts its clients on the first node by name.
	client, server := c.Nodes[0], c.Nodes[1]
	if server.Name < client.Name {
		client, server = server, client
	}
	if refchain {
		step("ReferenceChain", func(t *testing.T) { referenceChain(ctx, t, c) })
		return
	}
	step("Passes", func(t *testing.T) {
		out, code := runConnectivity(ctx, t, c, nil)
		t.Logf("podnet connectivity test:\n%s", out)
		if code != 0 || !strings.Contains(string(out), "PASSED") {
			t.Fatalf("exit %d, want 0 and PASSED", code)
		}
		// With the etcd variant (no --network-policy) nothing says
		// NetworkPolicy is enforced.
		wantUnjudged := variant == cluster.Etcd
		if unjudged := strings.Contains(string(out), "not judged  "); unjudged != wantUnjudged {
			t.Errorf("%s: a check not judged: %v, want %v", variant, unjudged, wantUnjudged)
		}
		noRunNamespaces(ctx, t, c)
	})
	if variant != cluster.Default {
		return
	}
	step("BrokenRoute", func(t *testing.T) {
		stop := breakRoutes(ctx, t, client, server)
		rep, code := runConnectivityJSON(ctx, t, c)
		stop()
		wantFailed(t, rep, code, "pod to pod, across nodes (TCP)", "pod to pod, across nodes (UDP)")
		// Blocked, but by the route, not the policy.
		for _, r := range rep.Results {
			if r.Check == "policy deny ingress: client blocked" && r.Status != connectivity.NotJudged {
				t.Errorf("%q with the route broken: %s, want not judged", r.Check, r.Status)
			}
		}
		noRunNamespaces(ctx, t, c)
	})
	step("DNSBlocked", func(t *testing.T) {
		stop := blockDNS(ctx, t, c, client)
		rep, code := runConnectivityJSON(ctx, t, c)
		stop()
		wantFailed(t, rep, code, "DNS: Service name to ClusterIP")
		noRunNamespaces(ctx, t, c)
	})
	step("SIGINT", func(t *testing.T) { interruptRun(ctx, t, c) })
}

// runConnectivity runs podnet connectivity test on the client's side of
// the cluster (the first node's network, where the API server listens),
// calling during (if not nil) once it started; it returns the output and
// the exit status.
func runConnectivity(ctx context.Context, t *testing.T, c *cluster.Cluster, during func(*exec.Cmd), args ...string) ([]byte, int) {
	t.Helper()
	bin := filepath.Join(c.Dir, "podnet-bin", "podnet")
	argv := append([]string{"--net=" + c.Nodes[0].NetNS, "--", bin, "connectivity", "test",
		"--kubeconfig", filepath.Join(c.Dir, "admin.kubeconfig"), "--image", cluster.PodnetImage}, args...)
	// nsenter without --fork execs podnet itself: a signal to it is
	// podnet's.
	cmd := exec.Command("nsenter", argv...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if during != nil {
		during(cmd)
	}
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		t.Fatalf("podnet connectivity test still running at the test's deadline:\n%s%s", out.String(), errOut.String())
	}
	t.Logf("stderr:\n%s", errOut.String())
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return out.Bytes(), exit.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return out.Bytes(), 0
}

func runConnectivityJSON(ctx context.Context, t *testing.T, c *cluster.Cluster) (*connectivity.Report, int) {
	t.Helper()
	out, code := runConnectivity(ctx, t, c, nil, "-o", "json")
	var rep connectivity.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("-o json: %v:\n%s", err, out)
	}
	return &rep, code
}

// wantFailed: the run exited 1 with each named check FAIL, and the same
// node's pod to pod check still passing.
func wantFailed(t *testing.T, rep *connectivity.Report, code int, names ...string) {
	t.Helper()
	status := map[string]connectivity.Result{}
	for i := range rep.Results {
		rep.Results[i].Duration = time.Duration(rep.Results[i].Millis) * time.Millisecond
		status[rep.Results[i].Check] = rep.Results[i]
	}
	var table bytes.Buffer
	_ = rep.WriteText(&table)
	t.Logf("the -o json report as the table prints it:\n%s", table.String())
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	for _, n := range names {
		if status[n].Status != connectivity.Fail {
			t.Errorf("%q: %s, want FAIL", n, status[n].Status)
		}
	}
	if s := status["pod to pod, same node (TCP)"].Status; s != connectivity.Pass {
		t.Errorf("pod to pod on one node: %s, want pass", s)
	}
}

// breakRoutes puts, in the client node, a blackhole route of another
// tool's (protocol boot) over the agent's route to the server node's
// pods: the agent leaves a route it does not own alone (a conflict;
// one it owns deleted by hand it puts back at once), so the break
// lasts until stopped. Stopping deletes it, and the agent's route must
// be back within seconds, before the next step.
func breakRoutes(ctx context.Context, t *testing.T, client, server *cluster.Node) (stop func()) {
	t.Helper()
	ip := func(args ...string) (string, error) {
		out, err := exec.Command("nsenter", append([]string{"--net=" + client.NetNS, "ip", "-4", "route"}, args...)...).CombinedOutput()
		return string(out), err
	}
	out, err := ip("show", "proto", "97")
	if err != nil {
		t.Fatalf("ip route on %s: %v: %s", client.Name, err, out)
	}
	var dst string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 2 && strings.Contains(line, "via "+server.IP+" ") {
			dst = f[0]
		}
	}
	if dst == "" {
		t.Fatalf("no route of %s via %s to break:\n%s", client.Name, server.IP, out)
	}
	if out, err := ip("replace", "blackhole", dst, "proto", "boot"); err != nil {
		t.Fatalf("blackhole %s on %s: %v: %s", dst, client.Name, err, out)
	}
	return func() {
		if out, err := ip("del", "blackhole", dst, "proto", "boot"); err != nil {
			t.Errorf("remove the blackhole %s on %s: %v: %s", dst, client.Name, err, out)
		}
		start := time.Now()
		waitUntil(ctx, t, "the agent's route to "+dst+" back", 30*time.Second, func() error {
			out, err := ip("show", "proto", "97", "exact", dst)
			if err != nil || !strings.Contains(out, "via "+server.IP) {
				return fmt.Errorf("%v: %q", err, out)
			}
			return nil
		})
		t.Logf("%s's route to %s's pods (%s) was back %s after the blackhole went", client.Name, server.Name, dst, time.Since(start).Round(time.Millisecond))
	}
}

// blockDNS puts into the next run's namespace, as soon as it exists, a
// NetworkPolicy that lets the client pods reach the namespace's pods and
// the nodes, and nothing else: not CoreDNS.
func blockDNS(ctx context.Context, t *testing.T, c *cluster.Cluster, n *cluster.Node) (stop func()) {
	t.Helper()
	underlay := netip.MustParsePrefix(n.IP + "/24").Masked().String()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		ns := waitRunNamespace(ctx, t, c)
		np := &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "block-dns"},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"role": connectivity.RoleClient}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
				Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{
					{PodSelector: &metav1.LabelSelector{}},
					{IPBlock: &networkingv1.IPBlock{CIDR: underlay}},
				}}},
			},
		}
		_, err := c.Client.NetworkingV1().NetworkPolicies(ns).Create(ctx, np, metav1.CreateOptions{})
		done <- err
	}()
	return func() {
		if err := <-done; err != nil {
			t.Errorf("NetworkPolicy block-dns: %v", err)
		}
		cancel()
	}
}

// waitRunNamespace returns the name of a run's namespace once one exists.
func waitRunNamespace(ctx context.Context, t *testing.T, c *cluster.Cluster) string {
	for ctx.Err() == nil {
		list, err := c.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: connectivity.LabelRun})
		if err == nil && len(list.Items) > 0 {
			return list.Items[0].Name
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Error("no namespace of a run appeared")
	return ""
}

// noRunNamespaces: the command waits until its namespace is gone before
// it exits, so none may be left, not even terminating.
func noRunNamespaces(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	list, err := c.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: connectivity.LabelRun})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range list.Items {
		t.Errorf("namespace %s left behind (%s)", ns.Name, ns.Status.Phase)
	}
}

// interruptRun sends SIGINT to a run a few seconds after its namespace
// appeared: it must end with status 1, say so, and leave nothing.
func interruptRun(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	out, code := runConnectivity(ctx, t, c, func(cmd *exec.Cmd) {
		waitRunNamespace(ctx, t, c)
		time.Sleep(3 * time.Second)
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Error(err)
		}
	})
	t.Logf("interrupted run:\n%s", out)
	if code == 0 || !strings.Contains(string(out), "FAILED (interrupted)") {
		t.Errorf("interrupted run exited %d, want 1 and FAILED (interrupted)", code)
	}
	noRunNamespaces(ctx, t, c)
}

// referenceChain: against the reference plugins (no podnet), nothing
// enforces NetworkPolicy, so the policy checks that were not blocked are
// not judged; and the bridge plugin's ipMasq masquerades traffic to the
// other node's pods (cluster.RefConflist), which the no-SNAT checks
// across nodes must catch. Everything else passes.
func referenceChain(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	rep, code := runConnectivityJSON(ctx, t, c)
	var table bytes.Buffer
	_ = rep.WriteText(&table)
	t.Logf("the -o json report as the table prints it:\n%s", table.String())
	if code != 1 {
		t.Errorf("exit %d, want 1 (SNAT between pods)", code)
	}
	for _, r := range rep.Results {
		want := connectivity.Pass
		switch {
		case strings.HasPrefix(r.Check, "pod to pod, across nodes"):
			want = connectivity.Fail
			if !strings.Contains(r.Detail, "SNAT") {
				t.Errorf("%q: %q, want SNAT named", r.Check, r.Detail)
			}
		case strings.HasSuffix(r.Check, "blocked"):
			want = connectivity.NotJudged
		}
		if r.Status != want {
			t.Errorf("%q: %s, want %s", r.Check, r.Status, want)
		}
	}
	noRunNamespaces(ctx, t, c)
}
