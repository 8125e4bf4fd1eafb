package uibrowser

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/podnet/podnet/flows"
	"github.com/podnet/podnet/internal/testutil"
)

// testAgent serves GET /flows as an agent does (flows/flowapi), over a
// fixed set of records: the filters the page sends (namespace, pod,
// verdict, protocol, port), limit, and follow=true: the snapshot, then
// each record push gives it, to every follower whose filter it matches.
type testAgent struct {
	srv     *httptest.Server
	records []flows.Record

	mu        sync.Mutex
	followers map[chan flows.Record]url.Values
	queries   []url.Values
}

func newTestAgent(t *testing.T, records []flows.Record) *testAgent {
	a := &testAgent{records: records, followers: map[chan flows.Record]url.Values{}}
	a.srv = httptest.NewServer(http.HandlerFunc(a.serve)) // 127.0.0.1
	t.Cleanup(a.srv.Close)
	return a
}

func (a *testAgent) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/flows" {
		http.NotFound(w, r)
		return
	}
	q := r.URL.Query()
	a.mu.Lock()
	a.queries = append(a.queries, q)
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	follow := q.Get("follow") == "true"
	ch := make(chan flows.Record, 16)
	if follow {
		// Subscribed before the snapshot, as the agent does: no record
		// falls between them.
		a.mu.Lock()
		a.followers[ch] = q
		a.mu.Unlock()
		defer func() {
			a.mu.Lock()
			delete(a.followers, ch)
			a.mu.Unlock()
		}()
	}
	for _, rec := range a.snapshot(q) {
		_ = enc.Encode(rec)
	}
	if !follow {
		return
	}
	w.(http.Flusher).Flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case rec := <-ch:
			_ = enc.Encode(rec)
			w.(http.Flusher).Flush()
		}
	}
}

// snapshot is the newest limit of the known records q's filter selects,
// oldest first.
func (a *testAgent) snapshot(q url.Values) []flows.Record {
	var out []flows.Record
	for _, rec := range a.records {
		if matches(rec, q) {
			out = append(out, rec)
		}
	}
	if n, err := strconv.Atoi(q.Get("limit")); err == nil && n < len(out) {
		out = out[len(out)-n:]
	}
	return out
}

// push streams rec to the followers whose filter it matches, and
// returns how many there were.
func (a *testAgent) push(rec flows.Record) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for ch, q := range a.followers {
		if matches(rec, q) {
			ch <- rec
			n++
		}
	}
	return n
}

// waitFollower waits until the one follower left is the page's current
// stream, whose query has verdict (the UI's stream reaches the agent a
// moment after the page shows it live; the one of a filter before ends a
// moment after).
func (a *testAgent) waitFollower(t *testing.T, verdict string) {
	t.Helper()
	testutil.Eventually(t, "the page's one follow stream, verdict="+verdict, 10*time.Second, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, q := range a.followers {
			return len(a.followers) == 1 && q.Get("verdict") == verdict
		}
		return false
	})
}

// asked says whether some request carried the parameter name=value.
func (a *testAgent) asked(name, value string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, q := range a.queries {
		if q.Get(name) == value {
			return true
		}
	}
	return false
}

func matches(rec flows.Record, q url.Values) bool {
	either := func(f func(flows.Endpoint) bool) bool { return f(rec.Src) || f(rec.Dst) }
	if ns := q.Get("namespace"); ns != "" && !either(func(e flows.Endpoint) bool { return e.Namespace == ns }) {
		return false
	}
	if pod := q.Get("pod"); pod != "" && !either(func(e flows.Endpoint) bool { return e.PodKey() == pod }) {
		return false
	}
	if v := q.Get("verdict"); v != "" && v != string(rec.Verdict) {
		return false
	}
	if p := q.Get("protocol"); p != "" && p != rec.Protocol {
		return false
	}
	if p := q.Get("port"); p != "" && !either(func(e flows.Endpoint) bool { return strconv.Itoa(int(e.Port)) == p }) {
		return false
	}
	return true
}

// The known flows: two namespaces (shop, billing), an address outside
// the pod network (203.0.113.10, and a forged source), every verdict.
var (
	t0 = time.Date(2026, 11, 29, 5, 30, 0, 0, time.UTC)

	web1   = pod("shop", "web-1", "10.244.1.5")
	web2   = pod("shop", "web-2", "10.244.1.6")
	db0    = pod("shop", "db-0", "10.244.2.7")
	api0   = pod("billing", "api-0", "10.244.2.9")
	ledger = pod("billing", "ledger-0", "10.244.1.12")
	remote = flows.Endpoint{IP: netip.MustParseAddr("203.0.113.10")}
	forged = flows.Endpoint{IP: netip.MustParseAddr("10.244.9.99")}

	allowDB     = flows.Rule{Kind: "NetworkPolicy", Namespace: "shop", Name: "db", Direction: "ingress", Index: 0, Action: "Allow"}
	allowWeb    = flows.Rule{Kind: "NetworkPolicy", Namespace: "shop", Name: "web", Direction: "egress", Index: 0, Action: "Allow"}
	allowAPI    = flows.Rule{Kind: "NetworkPolicy", Namespace: "billing", Name: "api-from-shop", Direction: "ingress", Index: 0, Action: "Allow"}
	isolateLedg = flows.Rule{Kind: "NetworkPolicy", Namespace: "billing", Name: "ledger", Direction: "ingress", Index: -1, Action: "Deny"}
	lockdown    = flows.Rule{Kind: "ClusterNetworkPolicy", Tier: "Admin", Name: "shop-db-lockdown", Direction: "ingress", Index: 1, Action: "Deny"}
)

func pod(ns, name, ip string) flows.Endpoint {
	return flows.Endpoint{IP: netip.MustParseAddr(ip), Namespace: ns, Pod: name}
}

func port(e flows.Endpoint, p uint16) flows.Endpoint { e.Port = p; return e }

func knownFlows() []flows.Record {
	recs := []flows.Record{
		{Node: "node-1", Event: flows.Start, Protocol: "TCP", Src: port(web1, 40112), Dst: port(db0, 5432), Verdict: flows.Forwarded, Rules: []flows.Rule{allowDB}},
		{Node: "node-2", Event: flows.Start, Protocol: "TCP", Src: port(web2, 51200), Dst: port(api0, 8080), Verdict: flows.Forwarded, Rules: []flows.Rule{allowAPI}},
		{Node: "node-1", Event: flows.Start, Protocol: "TCP", Src: port(web1, 40120), Dst: port(ledger, 9000), Verdict: flows.DroppedPolicy, Rules: []flows.Rule{isolateLedg}, Packets: 3},
		{Node: "node-1", Event: flows.End, Protocol: "TCP", Src: port(web1, 40112), Dst: port(db0, 5432), Verdict: flows.Forwarded, Rules: []flows.Rule{allowDB}, Packets: 24, Bytes: 5120},
		{Node: "node-2", Event: flows.Start, Protocol: "UDP", Src: port(forged, 5353), Dst: port(api0, 8080), Verdict: flows.DroppedGuard, Packets: 5},
		{Node: "node-2", Event: flows.End, Protocol: "TCP", Src: port(api0, 38000), Dst: port(remote, 443), Verdict: flows.Forwarded, Packets: 40, Bytes: 182_000},
		{Node: "node-2", Event: flows.Start, Protocol: "TCP", Src: port(api0, 38010), Dst: port(db0, 5432), Verdict: flows.DroppedPolicy, Rules: []flows.Rule{lockdown}, Packets: 2},
		{Node: "node-1", Event: flows.Start, Protocol: "TCP", Src: port(web2, 51300), Dst: port(db0, 5432), Verdict: flows.Forwarded, Rules: []flows.Rule{allowWeb, allowDB}},
		{Node: "node-1", Event: flows.Start, Protocol: "ICMP", Src: web2, Dst: db0, Verdict: flows.DroppedGuard, Packets: 2},
	}
	for i := range recs {
		recs[i].Time = t0.Add(time.Duration(i) * 850 * time.Millisecond)
		recs[i].Seq = uint64(i + 1)
	}
	return recs
}

// onNode keeps the records of node.
func onNode(recs []flows.Record, node string) []flows.Record {
	var out []flows.Record
	for _, r := range recs {
		if r.Node == node {
			out = append(out, r)
		}
	}
	return out
}

// liveFlow is the record streamed after the page has loaded: a pod the
// map has not shown yet.
func liveFlow() flows.Record {
	return flows.Record{
		Time: t0.Add(9 * time.Second), Node: "node-2", Event: flows.Start, Protocol: "TCP",
		Src: port(pod("shop", "web-3", "10.244.2.20"), 44000), Dst: port(api0, 8080),
		Verdict: flows.Forwarded, Rules: []flows.Rule{allowAPI}, Seq: 100,
	}
}
