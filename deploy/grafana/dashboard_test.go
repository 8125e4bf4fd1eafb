// Package grafana holds the podnet dashboard (podnet.json) and its test:
// every metric its queries name is one a running agent exports.
package grafana

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"k8s.io/client-go/rest"

	"github.com/podnet/podnet/agent"
	"github.com/podnet/podnet/agent/netpol/admitsock"
	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/flows"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

// dashboard is what the test reads of the dashboard JSON model.
type dashboard struct {
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
}

type panel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile("podnet.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("podnet.json: %v", err)
	}
	return d
}

// queries are the PromQL expressions of every panel, by panel title.
func (d dashboard) queries() map[string][]string {
	out := map[string][]string{}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out[p.Title] = append(out[p.Title], tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// TestDashboardAgainstAgent starts a real podnet agent in a node's
// network namespace, on the Kubernetes datastore of a small fake API
// server (one Node, one pod of the node isolated by a NetworkPolicy and
// allowed by another), with NetworkPolicy, WireGuard and, where the
// agent has them, flows on; scrapes its /metrics, and fails naming the
// panel and the metric for every metric a panel's query names that the
// agent does not export.
func TestDashboardAgainstAgent(t *testing.T) {
	d := readDashboard(t)
	testutil.RequireRoot(t)
	a := startAgent(t)
	var exported map[string]bool
	testutil.WaitFor(t, "the agent's policy metrics", 60*time.Second, func() (bool, error) {
		body, err := a.get("/metrics")
		if err != nil {
			return false, nil
		}
		exported = metricNames(body)
		if !exported["podnet_policy_apply_duration_seconds_bucket"] {
			return false, nil
		}
		// A CNI ADD's first-packet handshake, as the plugin makes it,
		// for the admission metrics.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = admitsock.Ask(ctx, a.policySocket, admitsock.Pod{Namespace: "shop", Name: "web", ContainerID: "c1", IfName: "eth0",
			HostIf: "veth-web", Addrs: []netip.Addr{netip.MustParseAddr("10.244.0.5")}})
		return exported["podnet_policy_denied_packets_total"] && exported["podnet_agent_wireguard_info"] &&
			exported["podnet_policy_admission_duration_seconds_bucket"], nil
	})
	if a.flows {
		// podnet_flows_policy_total's series are by policy: none until a
		// flow with a rule is recorded. No capture service records one in
		// this agent, so the agent's own code counts one in process.
		for name := range flowMetricsAfterOneRecord(t) {
			exported[name] = exported[name] || strings.HasPrefix(name, "podnet_flows_policy")
		}
	}
	checked := 0
	titles := sortedKeys(d.queries())
	for _, title := range titles {
		for _, q := range d.queries()[title] {
			for _, m := range queryMetrics(q) {
				if strings.HasPrefix(m, "podnet_flow") && !a.flows {
					t.Logf("panel %q: %s not checked: this agent has no --flows (branch flowcore not merged)", title, m)
					continue
				}
				checked++
				if !exported[m] {
					t.Errorf("panel %q: the agent does not export %s (query %s)", title, m, q)
				}
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d metric references checked", checked)
	}
}

// flowMetricsAfterOneRecord are the metric names an agent (built, not
// run) exports once one start record with a NetworkPolicy rule has
// passed through its flow sink.
func flowMetricsAfterOneRecord(t *testing.T) map[string]bool {
	reg := prometheus.NewRegistry()
	ag, err := agent.New(agent.Config{Node: "a", Kube: &agent.KubeConfig{REST: &rest.Config{Host: "https://192.0.2.1"}},
		Flows: flows.NewRing(16), Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	ag.FlowSink()(flows.Record{Time: time.Now(), Node: "a", Event: flows.Start, Protocol: "TCP", Verdict: flows.Forwarded,
		Rules: []flows.Rule{{Kind: "NetworkPolicy", Namespace: "shop", Name: "web", Direction: "ingress"}}})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	return names
}

// TestDashboardModel: the JSON model imports (schema, datasource input,
// every panel with a query), without an agent.
func TestDashboardModel(t *testing.T) {
	d := readDashboard(t)
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d", d.SchemaVersion)
	}
	raw, _ := os.ReadFile("podnet.json")
	if !bytes.Contains(raw, []byte(`"uid": "${DS_PROMETHEUS}"`)) || !bytes.Contains(raw, []byte(`"name": "DS_PROMETHEUS"`)) {
		t.Error("panels do not use the ${DS_PROMETHEUS} input")
	}
	for title, qs := range d.queries() {
		for _, q := range qs {
			if len(queryMetrics(q)) == 0 {
				t.Errorf("panel %q: query %q names no metric", title, q)
			}
		}
	}
}

func TestQueryMetrics(t *testing.T) {
	for q, want := range map[string][]string{
		`sum by (verb, code) (rate(podnet_agent_api_requests_total{instance=~"$instance"}[$__rate_interval]))`:          {"podnet_agent_api_requests_total"},
		`histogram_quantile(0.99, sum by (le, op) (rate(podnet_policy_apply_duration_seconds_bucket{job="x"}[5m])))`:    {"podnet_policy_apply_duration_seconds_bucket"},
		`podnet_flow_ring_records{instance=~"$instance"} / podnet_flow_ring_capacity`:                                   {"podnet_flow_ring_capacity", "podnet_flow_ring_records"},
		`topk(10, sum without (instance) (increase(a_total[1h] offset 5m))) > bool 0 and on (x) b unless ignoring(y) c`: {"a_total", "b", "c"},
		`max(podnet_policy_network_policies) or vector(0)`:                                                              {"podnet_policy_network_policies"},
		`count by (le) (x{a="by (z) foo"}) * group_left(k) y`:                                                           {"x", "y"},
	} {
		if got := queryMetrics(q); !slices.Equal(got, want) {
			t.Errorf("queryMetrics(%q) = %q, want %q", q, got, want)
		}
	}
}

var (
	stringLit  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	braces     = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	labelLists = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	durations  = regexp.MustCompile(`\b\d+(?:\.\d+)?(?:ms|[smhdwy])+\b`)
	identifier = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*\s*\(?`)
	keywords   = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
		"bool": true, "and": true, "or": true, "unless": true, "offset": true, "atan2": true, "inf": true, "nan": true}
)

// queryMetrics are the metric names a PromQL expression selects: its
// identifiers, less function calls (an identifier before a parenthesis),
// keywords, label matchers and grouping labels, strings and durations
// (offset 5m).
func queryMetrics(q string) []string {
	q = stringLit.ReplaceAllString(q, `""`)
	q = braces.ReplaceAllString(q, " ")
	q = labelLists.ReplaceAllString(q, " ")
	q = durations.ReplaceAllString(q, " ")
	seen := map[string]bool{}
	for _, m := range identifier.FindAllString(q, -1) {
		if strings.HasSuffix(m, "(") {
			continue
		}
		name := strings.TrimSpace(m)
		if keywords[strings.ToLower(name)] {
			continue
		}
		seen[name] = true
	}
	return sortedKeys(seen)
}

// metricNames are the series names of a Prometheus text exposition: the
// families of its TYPE lines (a histogram's with _bucket, _sum and
// _count) and the names of its samples.
func metricNames(exposition string) map[string]bool {
	names := map[string]bool{}
	for _, line := range strings.Split(exposition, "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			names[f[2]] = true
			if f[3] == "histogram" || f[3] == "summary" {
				names[f[2]+"_sum"], names[f[2]+"_count"] = true, true
			}
			if f[3] == "histogram" {
				names[f[2]+"_bucket"] = true
			}
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		names[name] = true
	}
	return names
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// agentProc is a podnet agent running in a node namespace.
type agentProc struct {
	ns           string
	policySocket string
	flows        bool
}

// startAgent starts the fake API server and the agent in a new node
// namespace; both end with the test.
func startAgent(t *testing.T) *agentProc {
	podnet := testutil.BuildBinary(t, "./cmd/podnet", t.TempDir())
	_, ns := testutil.NewNodeNetNS(t)
	a := &agentProc{ns: ns}
	if err := netns.Do(ns, func() error { return underlay("ul0", "198.18.0.20/24") }); err != nil {
		t.Fatal(err)
	}
	kubeconfig := startFakeAPI(t, ns)
	help, _ := exec.Command(podnet, "agent", "--help").CombinedOutput()
	dir := t.TempDir()
	a.policySocket = filepath.Join(dir, "policy.sock")
	args := []string{"--conf-dir", dir, "--bin-dir", dir, "--log-level", "info", "agent",
		"--node", "a", "--datastore", "kubernetes", "--kubeconfig", kubeconfig, "--store", "bolt:" + filepath.Join(dir, "ipam.db"),
		"--underlay-interface", "ul0", "--metrics-addr", "127.0.0.1:9603", "--gc-interval", "0",
		"--network-policy", "--policy-socket", a.policySocket,
		"--encryption", "wireguard", "--wireguard-key-file", filepath.Join(dir, "wg.key"),
		"--sysctl-record", filepath.Join(dir, "sysctls.json")}
	if bytes.Contains(help, []byte("--flows")) {
		a.flows = true
		args = append(args, "--flows")
	}
	// Userspace WireGuard (no kernel module) opens its UAPI socket in
	// /var/run/wireguard; the agent removes the socket when it stops,
	// and the directory goes too when this test made it.
	_, statErr := os.Stat(wgDir)
	t.Cleanup(func() {
		if os.IsNotExist(statErr) {
			_ = os.Remove(wgDir)
		}
	})
	cmd := exec.Command(podnet, args...)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := netns.Do(ns, cmd.Start); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("agent log:\n%s", logs.String())
		}
	})
	return a
}

const wgDir = "/var/run/wireguard"

func underlay(name, addr string) error {
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}); err != nil {
		return err
	}
	ul, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	if err := netlink.AddrAdd(ul, &netlink.Addr{IPNet: dataplane.IPNet(netip.MustParsePrefix(addr))}); err != nil {
		return err
	}
	return netlink.LinkSetUp(ul)
}

// get asks the agent's HTTP server from inside its namespace.
func (a *agentProc) get(path string) (string, error) {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (conn net.Conn, err error) {
		err = netns.Do(a.ns, func() error {
			conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return conn, err
	}}}
	resp, err := c.Get("http://127.0.0.1:9603" + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", path, resp.Status)
	}
	return string(b), err
}
