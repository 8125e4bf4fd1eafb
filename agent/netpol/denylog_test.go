package netpol

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/podnet/podnet/dataplane/nflog"
	"github.com/podnet/podnet/dataplane/policyrules"
	"github.com/podnet/podnet/policy"
)

// fakeLog hands the service what is sent on recs (nil: an overrun)
// until it is closed.
type fakeLog struct {
	recs   chan []nflog.Record
	closed chan struct{}
	once   sync.Once
}

func (f *fakeLog) Receive() ([]nflog.Record, error) {
	select {
	case r := <-f.recs:
		if r == nil {
			return nil, nflog.ErrLost
		}
		return r, nil
	case <-f.closed:
		return nil, context.Canceled
	}
}

func (f *fakeLog) Close() error {
	f.once.Do(func() { close(f.closed) })
	return nil
}

// syncBuffer is a log sink the service's goroutines may write while the
// test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "packet denied by network policy" {
			out = append(out, m)
		}
	}
	return out
}

// TestDenyLogLines: each record of the deny log is one structured line
// naming the pod (from the prefix, or by address when the name did not
// fit), the direction, the addresses, the protocol and the port; records
// of other writers are skipped, overruns counted, and the source is
// closed when Run returns.
func TestDenyLogLines(t *testing.T) {
	c := newCluster(t)
	c.addNamespace("x", nil)
	c.addNode(self, "198.18.0.1")
	c.addPod(apiPod("x", "db", self, map[string]string{"app": "db"}, "10.244.0.2"))
	c.addPolicy(denyFrom("x", "db", "db", ""))
	var out syncBuffer
	rec := newRecorder()
	s := New(Config{Node: self, Sources: c.sources(), DenyLog: &policyrules.DenyLog{Group: 1, Rate: 1, Burst: 1},
		Logger: slog.New(slog.NewJSONHandler(&out, nil))})
	s.open = func() (renderer, func() ([]netip.Addr, error), func(), error) {
		return rec, func() ([]netip.Addr, error) { return nil, nil }, func() {}, nil
	}
	src := &fakeLog{recs: make(chan []nflog.Record), closed: make(chan struct{})}
	s.openLog = func() (logSource, error) { return src, nil }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	rec.waitIR(t, "db isolated", func(ir *policy.IR) bool { return podRules(ir, "x", "db") != nil })
	// The renderer sees the IR before the service keeps it, and the log
	// names pods from the one it kept.
	<-s.FirstApplied()
	a := netip.MustParseAddr
	src.recs <- []nflog.Record{
		{Prefix: "podnet-deny ingress x/db", Src: a("10.244.1.9"), Dst: a("10.244.0.2"), Protocol: 6, SrcPort: 40000, DstPort: 5432},
		{Prefix: "someone else's", Src: a("10.0.0.1"), Dst: a("10.0.0.2"), Protocol: 17, DstPort: 53},
	}
	src.recs <- []nflog.Record{{Prefix: "podnet-deny egress", Src: a("10.244.0.2"), Dst: a("203.0.113.1"), Protocol: 1}}
	src.recs <- nil // an overrun
	want := []map[string]any{
		{"pod": "x/db", "direction": "ingress", "src": "10.244.1.9", "dst": "10.244.0.2", "protocol": "TCP", "port": float64(5432)},
		{"pod": "x/db", "direction": "egress", "src": "10.244.0.2", "dst": "203.0.113.1", "protocol": "ICMP"},
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(out.lines()) < len(want) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	select {
	case <-src.closed:
	default:
		t.Error("the deny log's source is open after Run returned")
	}
	got := out.lines()
	if len(got) != len(want) {
		t.Fatalf("lines %v, want %d", got, len(want))
	}
	for i, w := range want {
		for k, v := range w {
			if got[i][k] != v {
				t.Errorf("line %d: %s = %v, want %v (%v)", i, k, got[i][k], v, got[i])
			}
		}
		if _, has := got[i]["port"]; has && w["port"] == nil {
			t.Errorf("line %d has a port: %v", i, got[i])
		}
	}
	if n := testutil.ToFloat64(s.m.denyLogged); n != 2 {
		t.Errorf("deny_log_records_total %v, want 2", n)
	}
	if n := testutil.ToFloat64(s.m.denyLogLost); n < 1 {
		t.Errorf("deny_log_overruns_total %v, want at least 1", n)
	}
}
