package k8s_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podnet/podnet/clusterstatus"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// TestStatus runs the real `podnet status --kubeconfig` against two nodes
// with the default deployment: healthy, it exits 0 with both agents ready
// and their routing mode; then one node's agent goes down the way an
// agent stays down on a real node, a node-local fault that kills it at
// every start (its IPAM store, /var/lib/podnet/ipam.db, corrupt: a disk
// fault, or a file truncated by hand), so kubelet's restarts end in
// CrashLoopBackOff, and the command exits non-zero naming that node and
// why.
func TestStatus(t *testing.T) {
	testutil.RequireRoot(t)
	c := cluster.Start(t, cluster.WithNodes(2))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := c.Deploy(ctx, cluster.Default, nil); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		waitNodeReady(ctx, t, c, n.Name, 3*time.Minute)
	}
	kc := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := c.WriteJSONKubeconfig(kc); err != nil {
		t.Fatal(err)
	}
	// The CLI runs where the API server is reachable: the first node.
	status := func(args ...string) ([]byte, error) {
		return c.Nodes[0].Podnet(ctx, append([]string{"status", "--kubeconfig", kc}, args...)...)
	}
	var out []byte
	waitUntil(ctx, t, "podnet status exits 0", time.Minute, func() (err error) {
		out, err = status()
		return err
	})
	t.Logf("podnet status, healthy:\n%s", out)
	r := statusJSON(t, status)
	if !r.OK() || len(r.Nodes) != 2 {
		t.Fatalf("healthy cluster: %d nodes, problems %q", len(r.Nodes), r.Problems)
	}
	for _, n := range r.Nodes {
		if d := n.Agent; !n.Ready || d == nil || d.RoutingMode != "auto" || d.Datastore != "kubernetes" || d.IPAM != "node-cidr" ||
			d.Encryption.Mode != "none" || d.Policy == nil || d.Policy.LastApplied.IsZero() {
			t.Errorf("node %s: ready %v, agent %+v", n.Node, n.Ready, d)
		}
	}
	if r.Control.Model != "node-cidr" {
		t.Errorf("control: %+v", r.Control)
	}

	down := c.Nodes[1]
	breakAgentStore(ctx, t, c, down)
	start := time.Now()
	var text string
	waitUntil(ctx, t, "podnet status names "+down.Name, 2*time.Minute, func() error {
		out, err := status()
		text = string(out)
		if err == nil {
			return fmt.Errorf("exit 0:\n%s", out)
		}
		// The agent's own failure at start (exit code 1 and its error,
		// the DaemonSet's FallbackToLogsOnError), not the kill's 137.
		if !strings.Contains(text, "node "+down.Name+": agent pod ") || !strings.Contains(text, "not ready") || !strings.Contains(text, "exit code 1: ") {
			return fmt.Errorf("%v:\n%s", err, out)
		}
		return nil
	})
	t.Logf("podnet status, %s's agent down (named after %s):\n%s", down.Name, time.Since(start).Round(time.Second), text)
	if strings.Contains(text, "node "+c.Nodes[0].Name+": ") {
		t.Errorf("the healthy node %s has a problem:\n%s", c.Nodes[0].Name, text)
	}
}

// statusJSON runs status -o json, which exits 0 on a healthy cluster,
// and decodes its report.
func statusJSON(t *testing.T, status func(...string) ([]byte, error)) clusterstatus.Report {
	t.Helper()
	out, err := status("-o", "json")
	if err != nil {
		t.Fatalf("status -o json: %v", err)
	}
	var r clusterstatus.Report
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("status -o json: %v:\n%s", err, out)
	}
	return r
}

// breakAgentStore replaces n's IPAM store with a file bbolt refuses and
// kills n's agent by its PID: every new agent container fails to open
// the store and exits.
func breakAgentStore(ctx context.Context, t *testing.T, c *cluster.Cluster, n *cluster.Node) {
	t.Helper()
	var pid int
	// Its pod may not have passed its readiness probe yet.
	waitUntil(ctx, t, "a running agent container on "+n.Name, time.Minute, func() error {
		list, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: agentSelector, FieldSelector: "spec.nodeName=" + n.Name})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 {
			return fmt.Errorf("%d agent pods", len(list.Items))
		}
		pid, err = n.ContainerPID(ctx, "kube-system", list.Items[0].Name, "agent")
		return err
	})
	db := n.HostPath("/var/lib/podnet/ipam.db")
	// A new file renamed over the store: the running agent keeps the
	// old one open until it is killed.
	if err := os.WriteFile(db+".corrupt", []byte(strings.Repeat("not a bbolt file\n", 512)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(db+".corrupt", db); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d (agent on %s): %v", pid, n.Name, err)
	}
	t.Logf("%s: %s overwritten, agent (pid %d) killed", n.Name, db, pid)
}
