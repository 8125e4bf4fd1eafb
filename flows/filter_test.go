package flows

import (
	"net/url"
	"reflect"
	"testing"
)

func TestFilterMatch(t *testing.T) {
	np := Rule{Kind: "NetworkPolicy", Namespace: "shop", Name: "db", Direction: "ingress", Index: 0, Action: "Allow"}
	cnp := Rule{Kind: "ClusterNetworkPolicy", Tier: "Admin", Name: "deny-all", Direction: "ingress", Index: 1, Action: "Deny"}
	web := rec("n1", Forwarded, "TCP", "shop/web-1", "shop/db-0", 5432, np)
	out := rec("n2", DroppedPolicy, "UDP", "tools/dig", "192.0.2.1", 53, cnp)
	guard := rec("n2", DroppedGuard, "TCP", "shop/web-1", "198.51.100.1", 80)
	for _, tc := range []struct {
		name string
		f    Filter
		want []bool // web, out, guard
	}{
		{"empty", Filter{}, []bool{true, true, true}},
		{"namespace either side", Filter{Namespaces: []string{"tools"}}, []bool{false, true, false}},
		{"namespace missing", Filter{Namespaces: []string{"nowhere"}}, []bool{false, false, false}},
		{"pod as destination", Filter{Pods: []string{"shop/db-0"}}, []bool{true, false, false}},
		{"pod as source", Filter{Pods: []string{"shop/web-1"}}, []bool{true, false, true}},
		{"pod of another namespace", Filter{Pods: []string{"tools/web-1"}}, []bool{false, false, false}},
		{"verdicts", Filter{Verdicts: []Verdict{DroppedPolicy, DroppedGuard}}, []bool{false, true, true}},
		{"protocol", Filter{Protocols: []string{"UDP"}}, []bool{false, true, false}},
		{"port either side", Filter{Ports: []uint16{40112}}, []bool{true, true, true}},
		{"port", Filter{Ports: []uint16{53, 80}}, []bool{false, true, true}},
		{"node", Filter{Nodes: []string{"n2"}}, []bool{false, true, true}},
		{"network policy", Filter{Policies: []string{"shop/db"}}, []bool{true, false, false}},
		{"cluster policy", Filter{Policies: []string{"deny-all"}}, []bool{false, true, false}},
		{"cluster name is not a namespaced one", Filter{Policies: []string{"db"}}, []bool{false, false, false}},
		{"fields and", Filter{Namespaces: []string{"shop"}, Verdicts: []Verdict{DroppedGuard}}, []bool{false, false, true}},
	} {
		for i, r := range []Record{web, out, guard} {
			if got := tc.f.Match(r); got != tc.want[i] {
				t.Errorf("%s: record %d: %v, want %v", tc.name, i, got, tc.want[i])
			}
		}
	}
}

func TestParseFilter(t *testing.T) {
	for _, tc := range []struct {
		query   string
		want    Filter
		wantErr string
	}{
		{"", Filter{}, ""},
		{"namespace=shop&namespace=tools,shop", Filter{Namespaces: []string{"shop", "tools"}}, ""},
		{"pod=shop/web-1", Filter{Pods: []string{"shop/web-1"}}, ""},
		{"pod=web-1&namespace=shop", Filter{Namespaces: []string{"shop"}, Pods: []string{"shop/web-1"}}, ""},
		{"verdict=dropped", Filter{Verdicts: []Verdict{DroppedPolicy, DroppedGuard}}, ""},
		{"verdict=Forwarded,dropped-guard,dropped", Filter{Verdicts: []Verdict{Forwarded, DroppedGuard, DroppedPolicy}}, ""},
		{"protocol=tcp,17,icmpv6,47", Filter{Protocols: []string{"TCP", "UDP", "ICMPv6", "47"}}, ""},
		{"port=53,5432", Filter{Ports: []uint16{53, 5432}}, ""},
		{"node=node-1", Filter{Nodes: []string{"node-1"}}, ""},
		{"policy=shop/db,deny-all", Filter{Policies: []string{"shop/db", "deny-all"}}, ""},
		{"limit=5&follow=true", Filter{}, ""},
		{"namespace=Shop", Filter{}, `namespace "Shop": not a namespace name`},
		{"namespace=", Filter{}, `namespace "": not a namespace name`},
		{"pod=web-1", Filter{}, `pod "web-1": want namespace/name, or a name with one namespace`},
		{"pod=web-1&namespace=a,b", Filter{}, `pod "web-1": want namespace/name`},
		{"pod=shop/Web", Filter{}, `pod "shop/Web": not a name`},
		{"verdict=denied", Filter{}, `verdict "denied": want forwarded, dropped-policy, dropped-guard or dropped`},
		{"protocol=gre", Filter{}, `protocol "gre": want tcp, udp, sctp, icmp, icmpv6 or a protocol number`},
		{"protocol=256", Filter{}, `protocol "256"`},
		{"port=0", Filter{}, `port "0": want a port number, 1 to 65535`},
		{"port=65536", Filter{}, `port "65536"`},
		{"port=http", Filter{}, `port "http"`},
		{"node=a%2Fb", Filter{}, `node "a/b": not a node name`},
		{"policy=a/b/c", Filter{}, `policy "a/b/c": not a name`},
	} {
		q, err := url.ParseQuery(tc.query)
		if err != nil {
			t.Fatal(err)
		}
		f, err := ParseFilter(q)
		if tc.wantErr != "" {
			pe, ok := err.(*ParamError)
			if !ok || len(err.Error()) < len(tc.wantErr) || err.Error()[:len(tc.wantErr)] != tc.wantErr {
				t.Errorf("%q: error %v, want %q", tc.query, err, tc.wantErr)
			} else if pe.Param == "" {
				t.Errorf("%q: no parameter named", tc.query)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(f, tc.want) {
			t.Errorf("%q: %+v, %v; want %+v", tc.query, f, err, tc.want)
			continue
		}
		// Query gives it back.
		back, err := ParseFilter(f.Query())
		if err != nil || !reflect.DeepEqual(back, f) {
			t.Errorf("%q: Query %q parses to %+v, %v", tc.query, f.Query().Encode(), back, err)
		}
	}
}
