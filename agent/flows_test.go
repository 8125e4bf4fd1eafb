package agent

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/podnet/podnet/flows"
)

// TestFlowsOnAndOff: with a ring, /flows serves what the sink was given
// and the flow metrics count it, every known label value shown at 0
// before; without, /flows says how to turn them on and no flow metric
// exists.
func TestFlowsOnAndOff(t *testing.T) {
	on, err := New(Config{Node: "node-1", Kube: &KubeConfig{REST: &rest.Config{Host: "https://192.0.2.1"}}, Flows: flows.NewRing(16)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(on.Handler())
	defer srv.Close()
	_, metrics := getBody(t, srv.URL+"/metrics")
	for _, want := range []string{
		`podnet_flows_total{verdict="forwarded"} 0`, `podnet_flows_total{verdict="dropped-policy"} 0`, `podnet_flows_total{verdict="dropped-guard"} 0`,
		`podnet_flow_capture_lost_total{source="conntrack"} 0`, `podnet_flow_capture_lost_total{source="nflog"} 0`,
		"podnet_flow_ring_capacity 16", "podnet_flow_ring_records 0", "podnet_flow_ring_overwritten_total 0", "podnet_flow_subscriber_dropped_total 0",
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("metrics before any flow: no %s", want)
		}
	}
	np := flows.Rule{Kind: "NetworkPolicy", Namespace: "shop", Name: "db", Direction: "ingress", Action: "Allow"}
	cnp := flows.Rule{Kind: "ClusterNetworkPolicy", Tier: "Admin", Name: "deny-all", Direction: "egress", Index: 1, Action: "Deny"}
	sink := on.FlowSink()
	src := flows.Endpoint{IP: netip.MustParseAddr("10.244.1.5"), Port: 40112, Namespace: "shop", Pod: "web-1"}
	for range 17 {
		sink(flows.Record{Event: flows.Start, Protocol: "TCP", Verdict: flows.Forwarded, Src: src, Rules: []flows.Rule{np, np}})
	}
	sink(flows.Record{Event: flows.End, Protocol: "TCP", Verdict: flows.Forwarded, Src: src, Rules: []flows.Rule{np}})
	sink(flows.Record{Event: flows.Start, Protocol: "UDP", Verdict: flows.DroppedPolicy, Src: src, Rules: []flows.Rule{cnp}})
	on.FlowLost()(FlowSourceNFLOG, 3)
	_, metrics = getBody(t, srv.URL+"/metrics")
	for _, want := range []string{
		`podnet_flows_total{verdict="forwarded"} 17`, `podnet_flows_total{verdict="dropped-policy"} 1`,
		`podnet_flows_policy_total{kind="NetworkPolicy",policy="shop/db",tier="",verdict="forwarded"} 17`,
		`podnet_flows_policy_total{kind="ClusterNetworkPolicy",policy="deny-all",tier="Admin",verdict="dropped-policy"} 1`,
		`podnet_flow_capture_lost_total{source="nflog"} 3`, "podnet_flow_ring_records 16", "podnet_flow_ring_overwritten_total 3",
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("metrics: no %s", want)
		}
	}
	code, body := getBody(t, srv.URL+"/flows?verdict=dropped")
	if code != http.StatusOK || strings.Count(body, "\n") != 1 || !strings.Contains(body, `"node":"node-1"`) || !strings.Contains(body, `"seq":19`) {
		t.Errorf("/flows?verdict=dropped: %d %s", code, body)
	}
	if code, body := getBody(t, srv.URL+"/flows?verdict=nope"); code != http.StatusBadRequest || !strings.Contains(body, `verdict "nope"`) {
		t.Errorf("bad filter: %d %s", code, body)
	}

	off, err := New(Config{Node: "node-1", Kube: &KubeConfig{REST: &rest.Config{Host: "https://192.0.2.1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if off.FlowSink() != nil || off.FlowLost() != nil {
		t.Error("a sink with flows off")
	}
	srvOff := httptest.NewServer(off.Handler())
	defer srvOff.Close()
	if code, body := getBody(t, srvOff.URL+"/flows"); code != http.StatusNotFound || body != flowsOff+"\n" {
		t.Errorf("/flows off: %d %q", code, body)
	}
	if _, m := getBody(t, srvOff.URL+"/metrics"); strings.Contains(m, "podnet_flow") {
		t.Error("flow metrics with flows off")
	}
}

func getBody(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
