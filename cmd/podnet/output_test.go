package main

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/podnet/podnet/bench"
	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/sandbox"
)

// scripted are the commands a script may call: each takes -o json.
var scripted = [][]string{
	{"net", "ls"}, {"net", "validate"},
	{"pod", "add"}, {"pod", "check"}, {"pod", "del"}, {"pod", "status"}, {"pod", "ls"}, {"pod", "rm"}, {"pod", "gc"},
	{"ipam", "show"}, {"ipam", "check"}, {"ipam", "release"}, {"ipam", "pool", "ls"}, {"ipam", "migrate"},
	{"status"}, {"install"}, {"uninstall"}, {"bench"}, {"policy", "explain"},
	{"connectivity", "test"}, {"connectivity", "cleanup"}, {"wireguard", "rotate-key"},
	{"diag", "get"}, {"diag", "probe"}, {"flows"},
}

// TestOutputFlag: every scripted command takes -o json; a format it
// does not offer fails when the flag is parsed, before the command runs,
// naming the flag and the value.
func TestOutputFlag(t *testing.T) {
	for _, path := range scripted {
		root := newRootCommand()
		cmd, _, err := root.Find(path)
		if err != nil || cmd.Flags().Lookup("output") == nil || cmd.Flags().ShorthandLookup("o") == nil {
			t.Errorf("podnet %s: no -o/--output (%v)", strings.Join(path, " "), err)
			continue
		}
		if err := cmd.Flags().Set("output", "json"); err != nil {
			t.Errorf("podnet %s -o json: %v", strings.Join(path, " "), err)
		}
		root = newRootCommand()
		root.SetArgs(append(append([]string{}, path...), "-o", "yaml"))
		root.SetOut(&bytes.Buffer{})
		err = root.Execute()
		if err == nil || !strings.Contains(err.Error(), `"yaml"`) || !strings.Contains(err.Error(), "-o") || !strings.Contains(err.Error(), "want") {
			t.Errorf("podnet %s -o yaml: %v, want an error naming -o (--output) and \"yaml\"", strings.Join(path, " "), err)
		}
	}
}

// roundTrip writes rep as JSON, checks it is one document that decodes
// into the same type with the keys given, and returns the text form.
func roundTrip[T textWriter](t *testing.T, rep T, keys ...string) string {
	t.Helper()
	var out bytes.Buffer
	if err := writeOutput(&out, outputJSON, rep); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(out.Bytes()))
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil || dec.More() {
		t.Fatalf("%T: not one JSON document (%v):\n%s", rep, err, out.String())
	}
	for _, k := range keys {
		if _, ok := doc[k]; !ok {
			t.Errorf("%T: JSON lacks %q:\n%s", rep, k, out.String())
		}
	}
	var back T
	if err := json.Unmarshal(out.Bytes(), &back); err != nil {
		t.Errorf("%T: JSON does not decode into its type: %v", rep, err)
	}
	out.Reset()
	if err := writeOutput(&out, outputText, rep); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func wantText(t *testing.T, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("text lacks %q:\n%s", w, got)
		}
	}
}

func TestNetReports(t *testing.T) {
	ls := netList{Networks: []netEntry{{Name: "a", CNIVersion: "1.1.0", Plugins: []string{"podnet", "podnet-portmap"}, File: "/x/10-a.conflist"}}, Broken: []string{"/x/b.conf: bad"}}
	wantText(t, roundTrip(t, ls, "networks", "broken"), "NAME  CNIVERSION  PLUGINS", "a     1.1.0       podnet,podnet-portmap", "broken: /x/b.conf: bad")
	v := validateReport{ConfDir: "/x", Missing: []string{"gone"}, Problems: 2, Networks: []validatedNetwork{
		{Name: "a", File: "/x/a", CNIVersion: "1.1.0", Plugins: []string{"podnet"}, OK: true, Capabilities: []string{"portMappings"},
			Runtimes: []runtimeVersion{{Runtime: "podnet", Version: "1.1.0"}, {Runtime: "old", Error: "too new"}}},
		{Name: "b", File: "/x/b", Error: "plugin missing"}}}
	wantText(t, roundTrip(t, v, "networks", "missing", "problems"), `FAIL network "gone": not found in /x`, `ok   network "a" (/x/a) cniVersion 1.1.0 plugins podnet capabilities [portMappings]`,
		"run by podnet at 1.1.0", "not run by old: too new", `FAIL network "b" (/x/b): plugin missing`)
}

func TestPodReports(t *testing.T) {
	created := time.Date(2026, 11, 29, 5, 0, 0, 0, time.UTC)
	ls := podList{Pods: []podEntry{{Sandbox: &sandbox.Sandbox{Name: "web", Namespace: "default", NetNS: "/run/netns/podnet-web", IPs: []string{"10.1.0.2"}, Created: created}, State: "running"}}}
	text := roundTrip(t, ls, "pods")
	wantText(t, text, "web   default    -        10.1.0.2  /run/netns/podnet-web  running  2026-11-29T05:00:00Z")
	b, _ := json.Marshal(ls)
	if !strings.Contains(string(b), `"name":"web"`) || !strings.Contains(string(b), `"state":"running"`) || !strings.Contains(string(b), `"netns":"/run/netns/podnet-web"`) {
		t.Errorf("pod ls JSON: %s", b)
	}
	wantText(t, roundTrip(t, podRmReport{Removed: []string{"a", "b"}, Errors: []string{}}, "removed", "errors"), "a\nb\n")
	wantText(t, roundTrip(t, gcReport{StaleRecords: 2}, "staleRecordsRemoved"), "2 stale sandbox record(s) removed")
	wantText(t, roundTrip(t, gcReport{Network: "n", AttachmentsKept: 1, AttachmentsRemoved: 3}, "network", "attachmentsKept"), `network "n": 1 attachment(s) kept, 3 removed`)
	if s := roundTrip(t, attachmentReport{Verb: "del", Network: "n", OK: true}, "verb", "containerID", "ok"); s != "" {
		t.Errorf("pod del prints %q in text", s)
	}
	zero := 0
	res := &cni.Result{CNIVersion: "1.1.0", Interfaces: []*cni.Interface{{Name: "eth0"}},
		IPs: []*cni.IPConfig{{Interface: &zero, Address: netip.MustParsePrefix("10.1.0.2/24"), Gateway: netip.MustParseAddr("10.1.0.1")}}}
	wantText(t, roundTrip(t, addResult{res}, "cniVersion", "ips"), "eth0 10.1.0.2/24 gateway 10.1.0.1")
	st := podStatusReport{Network: "n", Ready: true, Attachment: res}
	wantText(t, roundTrip(t, st, "network", "ready", "attachment"), `network "n": ready`, `"cniVersion": "1.1.0"`)
	wantText(t, roundTrip(t, podStatusReport{Network: "n", Error: "no plugin"}, "ready", "error"), `network "n": not ready: no plugin`)
}

func TestStatusInstallReports(t *testing.T) {
	st := localStatus{ConfDir: "/x", Broken: []string{}, DefaultNetwork: &netEntry{Name: "a", CNIVersion: "1.1.0", Plugins: []string{"podnet"}, File: "/x/a"}, Ready: true}
	wantText(t, roundTrip(t, st, "defaultNetwork", "ready", "broken"), "default network: a (/x/a, cniVersion 1.1.0, plugins podnet)", "ready: yes")
	wantText(t, roundTrip(t, localStatus{ConfDir: "/x", NotReady: "no network"}, "defaultNetwork"), "default network: none in /x", "ready: no: no network")
	in := installReport{Plugins: []string{"podnet"}, BinDir: "/opt/cni/bin", Config: "/etc/cni/net.d/10-podnet.conflist", MTU: 1500, MTUNote: "pod MTU 1500"}
	wantText(t, roundTrip(t, in, "plugins", "binDir", "config", "mtu"), "pod MTU 1500\ninstalled [podnet] into /opt/cni/bin\nwrote /etc/cni/net.d/10-podnet.conflist")
	wantText(t, roundTrip(t, cleanupReport{Deleted: []string{"ns1"}}, "deleted"), "deleted 1 namespaces [ns1]")
}

func TestIPAMReports(t *testing.T) {
	rel := releaseReport{Handles: []string{"net.c1"}, Addresses: []string{"10.1.0.9"}, Errors: []string{}}
	wantText(t, roundTrip(t, rel, "handles", "addresses", "errors"), "released handle net.c1", "released 10.1.0.9")
	pl := poolList{Pools: []ipam.Pool{{Name: "p1", CIDR: netip.MustParsePrefix("10.108.0.0/16"), BlockSize: 24}}, Invalid: []string{}}
	wantText(t, roundTrip(t, pl, "pools", "invalid"), "p1    10.108.0.0/16  /24         -         false")
	m := migrateReport{From: "ipam/", To: "ipam2/", Pools: 1, Blocks: 2, Nodes: 3}
	wantText(t, roundTrip(t, m, "from", "to", "alreadyDone", "nodeIndexes"), "migrated ipam/ to ipam2/: 1 pools, 2 blocks, 3 node indexes (0 keys there already)")
	wantText(t, roundTrip(t, migrateReport{To: "ipam2/", AlreadyDone: true}), "already migrated: ipam2/ holds the layout marker")
}

func TestBenchJSON(t *testing.T) {
	bo := &benchOptions{rounds: 2, compareBin: "/ref"}
	ph := func(p50 time.Duration) []bench.Phase {
		return []bench.Phase{{Name: "sequential", Parallel: 1, Add: bench.Summary{N: 10, P50: p50}, Del: bench.Summary{N: 10, P50: p50 / 2}, Wall: time.Second}}
	}
	rep := bo.jsonReport(&globalOptions{loopback: "in-process"}, []benchChain{{name: "podnet"}, {name: "reference"}},
		[][][]bench.Phase{{ph(2 * time.Millisecond), ph(4 * time.Millisecond)}, {ph(6 * time.Millisecond), ph(8 * time.Millisecond)}})
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back benchReport
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, rep) {
		t.Fatalf("bench JSON does not round-trip (%v): %s", err, b)
	}
	if len(rep.Chains) != 2 || len(rep.Chains[0].Rounds) != 2 || rep.Chains[0].Rounds[1][0].Add.P50Ms != 4 || rep.ReferenceLoopback != "plugin" {
		t.Errorf("bench JSON: %s", b)
	}
	if rep.Chains[0].Median[0].PodsPerSecond != 10 {
		t.Errorf("median pods/s %v, want 10", rep.Chains[0].Median[0].PodsPerSecond)
	}
}

// TestOutputValueHelp: -o's help and completion name the formats.
func TestOutputValueHelp(t *testing.T) {
	cmd := &cobra.Command{Use: "x"}
	var out string
	addOutputFlag(cmd, &out, outputTable, outputJSON)
	f := cmd.Flags().Lookup("output")
	if out != "table" || f.DefValue != "table" || f.Usage != "table or json" {
		t.Errorf("default %q, flag %+v", out, f)
	}
	if err := f.Value.Set("text"); err == nil || !strings.Contains(err.Error(), "want table or json") {
		t.Errorf("Set(text): %v", err)
	}
}
