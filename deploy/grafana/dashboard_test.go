package grafana

import (
	"bytes"
	"slices"
	"testing"
)

// TestDashboardModel: the JSON model imports (schema, datasource input,
// every panel with a query that names a metric). Whether the agents
// export those metrics is judged on a real cluster (test/k8s TestFlows,
// TestWireGuard).
func TestDashboardModel(t *testing.T) {
	d, err := Parse(JSON)
	if err != nil {
		t.Fatal(err)
	}
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d", d.SchemaVersion)
	}
	if !bytes.Contains(JSON, []byte(`"uid": "${DS_PROMETHEUS}"`)) || !bytes.Contains(JSON, []byte(`"name": "DS_PROMETHEUS"`)) {
		t.Error("panels do not use the ${DS_PROMETHEUS} input")
	}
	qs := d.Queries()
	if len(qs) < 20 {
		t.Errorf("%d panels with queries", len(qs))
	}
	for title, qs := range qs {
		for _, q := range qs {
			if len(QueryMetrics(q)) == 0 {
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
		if got := QueryMetrics(q); !slices.Equal(got, want) {
			t.Errorf("QueryMetrics(%q) = %q, want %q", q, got, want)
		}
	}
}

func TestMissing(t *testing.T) {
	d, err := Parse(JSON)
	if err != nil {
		t.Fatal(err)
	}
	exported := MetricNames("# TYPE podnet_flows_total counter\npodnet_flows_total{verdict=\"forwarded\"} 3\n" +
		"# TYPE podnet_policy_apply_duration_seconds histogram\n")
	miss := d.Missing(exported, func(p string) bool {
		return p == "Flows/Flows by verdict" || p == "NetworkPolicy/Policy apply duration"
	})
	if len(miss) != 0 {
		t.Errorf("missing %v, want none", miss)
	}
	if miss := d.Missing(map[string]bool{}, func(p string) bool { return p == "Flows/Flows by verdict" }); !slices.Equal(miss["Flows/Flows by verdict"], []string{"podnet_flows_total"}) {
		t.Errorf("missing %v", miss)
	}
}
