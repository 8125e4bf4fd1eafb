package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/podnet/podnet/flows"
	"github.com/podnet/podnet/flows/flowapi"
)

var flowT0 = time.Date(2026, 11, 29, 5, 30, 0, 123e6, time.UTC)

func pod(ip string, port uint16, ns, name string) flows.Endpoint {
	return flows.Endpoint{IP: netip.MustParseAddr(ip), Port: port, Namespace: ns, Pod: name}
}

func TestFlowLine(t *testing.T) {
	np := flows.Rule{Kind: "NetworkPolicy", Namespace: "shop", Name: "db", Direction: "ingress", Index: 0, Action: "Allow"}
	cnp := flows.Rule{Kind: "ClusterNetworkPolicy", Tier: "Admin", Name: "deny-all", Direction: "ingress", Index: 1, Action: "Deny"}
	iso := flows.Rule{Kind: "NetworkPolicy", Namespace: "shop", Name: "default-deny", Direction: "ingress", Index: -1, Action: "Deny"}
	web, db := pod("10.244.1.5", 40112, "shop", "web-1"), pod("10.244.2.7", 5432, "shop", "db-0")
	for _, tc := range []struct {
		rec  flows.Record
		want string
	}{
		{flows.Record{Time: flowT0, Node: "node-1", Event: flows.Start, Protocol: "TCP", Src: web, Dst: db, Verdict: flows.Forwarded, Rules: []flows.Rule{np}},
			"2026-11-29 05:30:00.123 node-1 forwarded      TCP    shop/web-1:40112 -> shop/db-0:5432  NetworkPolicy shop/db ingress[0] Allow"},
		{flows.Record{Time: flowT0, Node: "node-1", Event: flows.End, Protocol: "TCP", Src: web, Dst: db, Verdict: flows.Forwarded, Rules: []flows.Rule{np}, Packets: 12, Bytes: 3456},
			"2026-11-29 05:30:00.123 node-1 forwarded      TCP    shop/web-1:40112 -> shop/db-0:5432  NetworkPolicy shop/db ingress[0] Allow  (end: 12 packets, 3456 bytes)"},
		{flows.Record{Time: flowT0, Node: "node-2", Event: flows.Start, Protocol: "UDP", Src: web, Dst: db, Verdict: flows.DroppedPolicy, Rules: []flows.Rule{cnp}, Packets: 3},
			"2026-11-29 05:30:00.123 node-2 dropped-policy UDP    shop/web-1:40112 -> shop/db-0:5432  ClusterNetworkPolicy Admin deny-all ingress[1] Deny  (3 packets)"},
		{flows.Record{Time: flowT0, Node: "node-2", Event: flows.Start, Protocol: "TCP", Src: web, Dst: db, Verdict: flows.DroppedPolicy, Rules: []flows.Rule{iso}, Packets: 1},
			"2026-11-29 05:30:00.123 node-2 dropped-policy TCP    shop/web-1:40112 -> shop/db-0:5432  NetworkPolicy shop/default-deny ingress (isolates) Deny"},
		{flows.Record{Time: flowT0, Node: "node-1", Event: flows.Start, Protocol: "TCP", Src: flows.Endpoint{IP: netip.MustParseAddr("10.244.1.99"), Port: 1234},
			Dst: flows.Endpoint{IP: netip.MustParseAddr("fd00::1"), Port: 80}, Verdict: flows.DroppedGuard},
			"2026-11-29 05:30:00.123 node-1 dropped-guard  TCP    10.244.1.99:1234 -> [fd00::1]:80  source guard"},
		{flows.Record{Time: flowT0, Node: "node-1", Event: flows.Start, Protocol: "ICMP", Src: web, Dst: flows.Endpoint{IP: netip.MustParseAddr("192.0.2.1")}, Verdict: flows.Forwarded},
			"2026-11-29 05:30:00.123 node-1 forwarded      ICMP   shop/web-1:40112 -> 192.0.2.1"},
	} {
		if got := flowLine(tc.rec); got != tc.want {
			t.Errorf("\n got %q\nwant %q", got, tc.want)
		}
	}
}

func TestMergeFlows(t *testing.T) {
	at := func(node string, sec int, seq uint64) flows.Record {
		return flows.Record{Time: flowT0.Add(time.Duration(sec) * time.Second), Node: node, Seq: seq}
	}
	a := []flows.Record{at("a", 1, 1), at("a", 3, 2), at("a", 3, 3), at("a", 7, 4)}
	b := []flows.Record{at("b", 2, 10), at("b", 3, 11), at("b", 9, 12)}
	show := func(rs []flows.Record) string {
		var s []string
		for _, r := range rs {
			s = append(s, fmt.Sprintf("%s%d", r.Node, r.Seq))
		}
		return strings.Join(s, " ")
	}
	for _, tc := range []struct {
		limit int
		want  string
	}{
		{0, "a1 b10 a2 a3 b11 a4 b12"},
		{3, "b11 a4 b12"},
		{100, "a1 b10 a2 a3 b11 a4 b12"},
	} {
		if got := show(mergeFlows([][]flows.Record{a, nil, b}, tc.limit)); got != tc.want {
			t.Errorf("limit %d: %s, want %s", tc.limit, got, tc.want)
		}
	}
}

// agentServer is an agent's /flows with n records of node, a second
// apart from start.
func agentServer(t *testing.T, node string, start time.Time, n int) (*httptest.Server, *flows.Ring) {
	ring := flows.NewRing(64)
	for i := range n {
		ring.Add(flows.Record{Time: start.Add(time.Duration(i) * time.Second), Node: node, Event: flows.Start, Protocol: "TCP",
			Src: pod("10.244.1.5", 40112, "shop", "web-1"), Dst: pod("10.244.2.7", 5432, "shop", "db-0"), Verdict: flows.Forwarded})
	}
	srv := httptest.NewServer(flowapi.Handler(ring, node))
	t.Cleanup(srv.Close)
	return srv, ring
}

func runFlows(ctx context.Context, args ...string) (string, string, error) {
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append([]string{"flows"}, args...))
	err := root.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

// TestFlowsCommandList: two agents' records merged by time, an agent
// with flows off named on stderr, exit 1 when none answers.
func TestFlowsCommandList(t *testing.T) {
	a, _ := agentServer(t, "node-1", flowT0, 3)
	b, _ := agentServer(t, "node-2", flowT0.Add(500*time.Millisecond), 3)
	off := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "flows are off: start the agent with --flows", http.StatusNotFound)
	}))
	defer off.Close()
	out, errOut, err := runFlows(context.Background(), "--agent", a.URL, "--agent", b.URL, "--agent", off.URL, "--limit", "4", "-n", "shop")
	if err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for l := range strings.Lines(out) {
		nodes = append(nodes, strings.Fields(l)[2])
	}
	if strings.Join(nodes, " ") != "node-2 node-1 node-2 node-1" && strings.Join(nodes, " ") != "node-1 node-2 node-1 node-2" {
		t.Errorf("merged:\n%s", out)
	}
	if !strings.Contains(errOut, off.URL+": GET /flows: 404 Not Found: flows are off: start the agent with --flows") {
		t.Errorf("stderr: %q", errOut)
	}
	out, _, err = runFlows(context.Background(), "--agent", a.URL, "-o", "json", "--limit", "1")
	if err != nil || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"seq":3`) {
		t.Errorf("json: %v %q", err, out)
	}
	_, errOut, err = runFlows(context.Background(), "--agent", off.URL)
	if err != exitCode(1) || !strings.Contains(errOut, "flows are off") {
		t.Errorf("none answered: %v %q", err, errOut)
	}
	if _, _, err := runFlows(context.Background(), "--agent", a.URL, "--verdict", "denied"); err == nil || !strings.Contains(err.Error(), `--verdict "denied": want forwarded`) {
		t.Errorf("bad --verdict: %v", err)
	}
}

// TestFlowsCommandFollow: the snapshots merged, then each agent's new
// records as they come, until interrupted.
func TestFlowsCommandFollow(t *testing.T) {
	a, ringA := agentServer(t, "node-1", flowT0, 2)
	b, ringB := agentServer(t, "node-2", flowT0.Add(500*time.Millisecond), 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		deadline := time.Now().Add(10 * time.Second)
		for ringA.Stats().Subscribers+ringB.Stats().Subscribers < 2 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		r := flows.Record{Time: flowT0.Add(time.Hour), Event: flows.Start, Protocol: "UDP", Verdict: flows.DroppedPolicy,
			Src: pod("10.244.1.5", 40112, "shop", "web-1"), Dst: pod("10.244.2.7", 53, "kube-system", "dns")}
		r.Node = "node-2"
		ringB.Add(r)
		r.Node = "node-1"
		ringA.Add(r)
		ringA.Add(flows.Record{Time: flowT0.Add(time.Hour), Node: "node-1", Protocol: "TCP", Verdict: flows.Forwarded})
		time.Sleep(500 * time.Millisecond)
		cancel()
	}()
	out, errOut, err := runFlows(ctx, "--agent", a.URL, "--agent", b.URL, "-f", "--limit", "2", "--verdict", "forwarded,dropped", "--protocol", "udp,tcp", "--namespace", "shop")
	if err != nil || errOut != "" {
		t.Fatalf("%v %q", err, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 || !strings.Contains(lines[0], "05:30:00.123 node-1") || !strings.Contains(lines[3], "05:30:01.623 node-2") ||
		!strings.Contains(lines[4], "dropped-policy") || !strings.Contains(lines[5], "dropped-policy") {
		t.Errorf("follow:\n%s", out)
	}
}

// TestFlowsPodSource: a running agent pod is read through its proxy on
// the API server, at its port named metrics; one not running is named
// with its phase.
func TestFlowsPodSource(t *testing.T) {
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "https://192.0.2.1:6443"})
	if err != nil {
		t.Fatal(err)
	}
	o := &flowsCommandOptions{port: 9603, timeout: time.Second}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "podnet-abcde", Namespace: "kube-system"},
		Spec:   corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "agent", Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9700}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	s := o.podSource(cs, http.DefaultClient, p)
	if s.err != nil || s.name != "node-1" || s.client.URL != "https://192.0.2.1:6443/api/v1/namespaces/kube-system/pods/podnet-abcde:9700/proxy" {
		t.Errorf("running: %+v %v", s, s.client)
	}
	p.Status.Phase = corev1.PodPending
	if s := o.podSource(cs, http.DefaultClient, p); s.err == nil || s.err.Error() != "agent pod podnet-abcde is pending" {
		t.Errorf("pending: %v", s.err)
	}
}
