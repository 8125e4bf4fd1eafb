package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Keeping a cluster up after its test, to look at it: with
// PODNET_K8S_KEEP=1 (or =failed, only when the test failed) the teardown
// leaves everything running, tells the reaper not to clean up, writes
// the reaper's plan to Dir/reap.json and logs how to reach the cluster
// and how to remove it. The reaper removes it later, fed that plan:
//
//	cd test/k8s && go test -c -o /tmp/podnet-k8s.test . &&
//		PODNET_K8S_REAPER=1 /tmp/podnet-k8s.test < <Dir>/reap.json
//
// A test killed by go test's -timeout is reaped as always: a process
// that dies before its cleanups run cannot say keep.

// keepEnv names when to keep the cluster: "1" always, "failed" when the
// test failed; unset or "0", never.
const keepEnv = "PODNET_K8S_KEEP"

// keepMode reads keepEnv.
func keepMode() (string, error) {
	switch v := os.Getenv(keepEnv); v {
	case "", "0":
		return "", nil
	case "1", "failed":
		return v, nil
	default:
		return "", fmt.Errorf("%s=%q: 1 (always), failed (when the test failed) or 0", keepEnv, v)
	}
}

// keeping says whether the teardown is to keep the cluster.
func (c *Cluster) keeping() bool {
	return c.keep == "1" || c.keep == "failed" && c.t.Failed()
}

// unlessKept is the test as the cluster's namespaces see it: their
// cleanups (testutil.NewNetNS removes the namespace) are skipped when
// the cluster is kept, as they run after the cluster's own teardown.
type unlessKept struct {
	testing.TB
	c *Cluster
}

func (u unlessKept) Cleanup(f func()) {
	u.TB.Cleanup(func() {
		if !u.c.kept {
			f()
		}
	})
}

// hold is the teardown of a kept cluster: the reaper is told that all is
// done and exits, and what it would have removed is written down for a
// reaper started later.
func (c *Cluster) hold() error {
	c.kept = true
	plan := c.reaperPlan()
	for _, p := range c.procs {
		if p.exited() {
			continue
		}
		if start, err := procStart(p.cmd.Process.Pid); err == nil {
			plan.Procs = append(plan.Procs, procID{PID: p.cmd.Process.Pid, Start: start})
		}
	}
	b, err := json.Marshal(plan)
	if err != nil {
		return err
	}
	planPath := filepath.Join(c.Dir, "reap.json")
	if err := os.WriteFile(planPath, append(b, '\n'), 0o600); err != nil {
		return err
	}
	if err := c.reaper.done(); err != nil {
		return err
	}
	c.t.Logf("cluster: kept (%s=%s)\n%s", keepEnv, c.keep, c.keptHelp(planPath))
	return nil
}

// keptHelp says where a kept cluster is and how to reach and remove it.
func (c *Cluster) keptHelp(planPath string) string {
	var b strings.Builder
	kubectl := filepath.Join(c.kubeBin, "kubectl")
	fmt.Fprintf(&b, "  directory:  %s\n", c.Dir)
	fmt.Fprintf(&b, "  logs:       %s/*.log (components), each node's pod-logs/ (containers)\n", c.logDir)
	fmt.Fprintf(&b, "  kubeconfig: %s (the API server listens at %s, reachable from a node's network namespace)\n",
		c.kubeconfig(), apiserverAddr())
	if len(c.Nodes) > 0 {
		fmt.Fprintf(&b, "  kubectl:    ip netns exec %s %s --kubeconfig %s get pods -A -o wide\n",
			c.Nodes[0].netnsName, kubectl, c.kubeconfig())
	}
	for _, n := range c.Nodes {
		fmt.Fprintf(&b, "  %s (%s): network namespace %s\n", n.Name, n.IP, n.netnsName)
		fmt.Fprintf(&b, "    shell:      nsenter %s -- bash\n", strings.Join(n.place().nsenterArgs(), " "))
		fmt.Fprintf(&b, "    containers: %s --address %s -n k8s.io containers ls\n", c.containerdCommand("ctr"), n.containerdSock)
		fmt.Fprintf(&b, "    pod logs:   %s\n", n.PodLogsDir)
	}
	fmt.Fprintf(&b, "  remove it (stop everything, unmount, delete the namespaces and %s):\n", c.Dir)
	fmt.Fprintf(&b, "    cd %s && go test -c -o /tmp/podnet-k8s.test . && %s=1 /tmp/podnet-k8s.test < %s\n",
		filepath.Join(c.ModuleRoot, "test/k8s"), reaperRoleEnv, planPath)
	return b.String()
}
