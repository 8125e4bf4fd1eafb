package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

// node is a test node: podnet and its plugins, a conf dir with a podnet
// network (routed, the test IPAM, podnet-portmap), and a "host" network
// namespace that podnet itself runs in, so nothing touches the real host.
type node struct {
	t                        *testing.T
	podnet, confDir, binDir  string
	cacheDir, stateDir, ipam string
	hostNS                   string
}

func newNode(t *testing.T) *node {
	t.Helper()
	testutil.RequireRoot(t)
	n := &node{t: t, confDir: t.TempDir(), binDir: t.TempDir(), cacheDir: t.TempDir(), stateDir: t.TempDir(), ipam: t.TempDir()}
	n.podnet = testutil.BuildBinary(t, "./cmd/podnet", t.TempDir())
	for _, p := range []string{"./plugins/loopback", "./plugins/podnet", "./plugins/podnet-portmap", "./internal/testipamplugin"} {
		testutil.BuildBinary(t, p, n.binDir)
	}
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"runnet","plugins":[
		{"type":"podnet","ipam":{"type":"testipamplugin","dataDir":%q,"ranges":["10.102.0.0/24"]}},
		{"type":"podnet-portmap","capabilities":{"portMappings":true}}]}`, n.ipam)
	if err := os.WriteFile(filepath.Join(n.confDir, "10-runnet.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	// Forwarding off, as on a fresh host: a node that works only because
	// the machine running the test forwards would hide a missing sysctl.
	_, n.hostNS = testutil.NewNodeNetNS(t)
	return n
}

// run runs podnet inside the node's host namespace.
func (n *node) run(args ...string) (stdout, stderr string, code int) {
	n.t.Helper()
	full := append([]string{"--conf-dir", n.confDir, "--bin-dir", n.binDir, "--cache-dir", n.cacheDir, "--state-dir", n.stateDir}, args...)
	cmd := exec.Command(n.podnet, full...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := netns.Do(n.hostNS, cmd.Start); err != nil {
		n.t.Fatal(err)
	}
	err := cmd.Wait()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		n.t.Fatal(err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// assertClean checks that nothing of any pod is left: sandboxes and their
// namespaces, cached attachments, host veths and routes, allocations.
func (n *node) assertClean() {
	n.t.Helper()
	if entries, _ := os.ReadDir(n.stateDir); len(entries) != 0 {
		n.t.Errorf("sandbox records left: %v", entries)
	}
	if entries, _ := os.ReadDir(filepath.Join(n.cacheDir, "results")); len(entries) != 0 {
		n.t.Errorf("cached attachments left: %v", entries)
	}
	if entries, _ := os.ReadDir(netns.RunDir); true {
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "podnet-pntest") {
				n.t.Errorf("namespace left: %s", e.Name())
			}
		}
	}
	err := netns.Do(n.hostNS, func() error {
		links, err := netlink.LinkList()
		if err != nil {
			return err
		}
		for _, l := range links {
			if strings.HasPrefix(l.Attrs().Name, "pn") {
				n.t.Errorf("host veth left: %s", l.Attrs().Name)
			}
		}
		routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, r := range routes {
			if r.Dst != nil && strings.HasPrefix(r.Dst.String(), "10.102.") {
				n.t.Errorf("pod route left: %v", r.Dst)
			}
		}
		return nil
	})
	if err != nil {
		n.t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(n.ipam, "state.json"))
	if err == nil {
		var st struct {
			Allocs map[string][]string `json:"allocs"`
		}
		if json.Unmarshal(b, &st) == nil && len(st.Allocs) != 0 {
			n.t.Errorf("addresses still allocated: %v", st.Allocs)
		}
	}
}

func TestRunPrintsPodAddressAndCleansUp(t *testing.T) {
	n := newNode(t)
	out, errOut, code := n.run("run", "--name", "pntest-run1", "-p", "18081:80", "--", "ip", "-4", "-o", "addr", "show", "dev", "eth0")
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if !regexp.MustCompile(`eth0\s+inet 10\.102\.0\.\d+/32`).MatchString(out) {
		t.Errorf("pod address not printed: %q", out)
	}
	n.assertClean()
}

func TestRunPassesExitStatus(t *testing.T) {
	n := newNode(t)
	for _, tc := range []struct {
		argv []string
		want int
	}{
		{[]string{"false"}, 1},
		{[]string{"sh", "-c", "exit 7"}, 7},
		{[]string{"sh", "-c", "kill -TERM $$"}, 128 + 15},
	} {
		_, errOut, code := n.run(append([]string{"run", "--name", "pntest-run2", "--"}, tc.argv...)...)
		if code != tc.want {
			t.Errorf("%v: exit %d, want %d (%s)", tc.argv, code, tc.want, errOut)
		}
		n.assertClean()
	}
}

func TestRunSetupFailureLeavesNothing(t *testing.T) {
	n := newNode(t)
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"runnet","plugins":[
		{"type":"podnet","ipam":{"type":"testipamplugin","dataDir":%q,"ranges":["10.102.0.0/24"],"fail":{"ADD":{"code":11,"msg":"pool exhausted"}}}}]}`, n.ipam)
	if err := os.WriteFile(filepath.Join(n.confDir, "10-runnet.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := n.run("run", "--name", "pntest-run3", "--", "true")
	if code != 1 || !strings.Contains(errOut, "pool exhausted") || !strings.Contains(errOut, "CNI error code 11") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	n.assertClean()
}

func TestStatusAndNetCommands(t *testing.T) {
	n := newNode(t)
	out, _, code := n.run("status")
	if code != 0 || !strings.Contains(out, "default network: runnet") || !strings.Contains(out, "ready: yes") {
		t.Errorf("status: %d %s", code, out)
	}
	out, _, code = n.run("net", "validate")
	if code != 0 || !strings.Contains(out, `ok   network "runnet"`) || !strings.Contains(out, "capabilities [portMappings]") {
		t.Errorf("net validate: %d %s", code, out)
	}
	var st localStatus
	if out, _, code = n.run("status", "-o", "json"); code != 0 || json.Unmarshal([]byte(out), &st) != nil || !st.Ready || st.DefaultNetwork == nil || st.DefaultNetwork.Name != "runnet" {
		t.Errorf("status -o json: %d %s", code, out)
	}
	var ls netList
	if out, _, code = n.run("net", "ls", "-o", "json"); code != 0 || json.Unmarshal([]byte(out), &ls) != nil || len(ls.Networks) != 1 || ls.Networks[0].Plugins[0] != "podnet" {
		t.Errorf("net ls -o json: %d %s", code, out)
	}
	if err := os.WriteFile(filepath.Join(n.confDir, "05-bad.conflist"), []byte(`{"name":"bad","cniVersion":"1.0.0","plugins":[{"type":"nope"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, code = n.run("net", "validate")
	if code != 1 || !strings.Contains(out, `FAIL network "bad"`) || !strings.Contains(out, `plugin "nope" not found`) {
		t.Errorf("net validate with a missing plugin: %d %s", code, out)
	}
	var v validateReport
	if out, _, code = n.run("net", "validate", "-o", "json"); code != 1 || json.Unmarshal([]byte(out), &v) != nil || v.Problems != 1 || len(v.Networks) != 2 {
		t.Errorf("net validate -o json with a missing plugin: %d %s", code, out)
	}
	if err := os.RemoveAll(n.confDir); err != nil {
		t.Fatal(err)
	}
	out, _, code = n.run("status")
	if code != 1 || !strings.Contains(out, "ready: no: cni config uninitialized") {
		t.Errorf("status without config: %d %s", code, out)
	}
}

// TestBenchRounds: bench --rounds prints each round and the medians, and
// leaves no namespace behind.
func TestBenchRounds(t *testing.T) {
	n := newNode(t)
	out, stderr, code := n.run("bench", "--pods", "2", "--parallel", "2", "--rounds", "2")
	if code != 0 {
		t.Fatalf("bench: exit %d\n%s\n%s", code, out, stderr)
	}
	for _, want := range []string{"round", "median of 2 rounds:", "podnet  sequential", "podnet  parallel=2"} {
		if !strings.Contains(out, want) {
			t.Errorf("bench output lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(stderr, "(round ") != 2 {
		t.Errorf("progress for 2 rounds expected:\n%s", stderr)
	}
	var rep benchReport
	out, stderr, code = n.run("bench", "--pods", "2", "--parallel", "2", "-o", "json")
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Chains) != 1 || len(rep.Chains[0].Median) != 2 || rep.Chains[0].Median[0].Add.N != 2 {
		t.Errorf("bench -o json: exit %d\n%s\n%s", code, out, stderr)
	}
	if _, _, code := n.run("bench", "--rounds", "0"); code == 0 {
		t.Error("bench --rounds 0: exit 0")
	}
	n.assertClean()
}

// TestBenchPolicy: bench --policy runs the policy service beside podnet,
// every ADD answered as the mode says (bench fails otherwise), and prints
// the difference; the service's tables go with bench's host namespace.
func TestBenchPolicy(t *testing.T) {
	n := newNode(t)
	for _, mode := range []string{"selected", "unselected"} {
		out, stderr, code := n.run("bench", "--pods", "3", "--parallel", "3", "--policy", mode)
		if code != 0 {
			t.Fatalf("bench --policy %s: exit %d\n%s\n%s", mode, code, out, stderr)
		}
		for _, want := range []string{"podnet+policy  sequential", "podnet+policy - podnet  parallel=3", mode + " pods"} {
			if !strings.Contains(out, want) {
				t.Errorf("bench --policy %s output lacks %q:\n%s", mode, want, out)
			}
		}
	}
	if _, stderr, code := n.run("bench", "--policy", "some"); code == 0 || !strings.Contains(stderr, `--policy "some"`) {
		t.Errorf("bench --policy some: exit %d, %s", code, stderr)
	}
	n.assertClean()
}
