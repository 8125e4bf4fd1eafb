package flows

import (
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"
)

var t0 = time.Date(2026, 11, 29, 5, 30, 0, 0, time.UTC)

// rec is a record of a flow from pod src to pod dst (namespace/name,
// or an address alone).
func rec(node string, v Verdict, proto string, src, dst string, dport uint16, rules ...Rule) Record {
	ep := func(s string, port uint16) Endpoint {
		if a, err := netip.ParseAddr(s); err == nil {
			return Endpoint{IP: a, Port: port}
		}
		ns, name, _ := cutSlash(s)
		return Endpoint{IP: netip.MustParseAddr("10.244.1.5"), Port: port, Namespace: ns, Pod: name}
	}
	return Record{Time: t0, Node: node, Event: Start, Protocol: proto, Src: ep(src, 40112), Dst: ep(dst, dport), Verdict: v, Rules: rules}
}

func cutSlash(s string) (string, string, bool) {
	for i := range s {
		if s[i] == '/' {
			return s[:i], s[i+1:], true
		}
	}
	return "", s, false
}

func seqs(rs []Record) []uint64 {
	out := make([]uint64, len(rs))
	for i, r := range rs {
		out[i] = r.Seq
	}
	return out
}

func TestRingOverwrite(t *testing.T) {
	for _, tc := range []struct {
		name            string
		capacity, adds  int
		limit           int
		want            []uint64
		wantOverwritten uint64
	}{
		{"empty", 16, 0, 10, nil, 0},
		{"partial", 16, 5, 10, []uint64{1, 2, 3, 4, 5}, 0},
		{"limit keeps the newest", 16, 5, 2, []uint64{4, 5}, 0},
		{"full", 16, 16, 100, seqRange(1, 16), 0},
		{"wrapped", 16, 20, 100, seqRange(5, 20), 4},
		{"wrapped twice", 16, 40, 3, []uint64{38, 39, 40}, 24},
		{"zero limit", 16, 5, 0, nil, 0},
		{"capacity raised to the minimum", 1, 20, 100, seqRange(5, 20), 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRing(tc.capacity)
			for range tc.adds {
				r.Add(rec("n1", Forwarded, "TCP", "a/x", "b/y", 80))
			}
			got := seqs(r.Snapshot(Filter{}, tc.limit))
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("snapshot seqs %v, want %v", got, tc.want)
			}
			st := r.Stats()
			if st.Overwritten != tc.wantOverwritten || st.Capacity != max(tc.capacity, MinCapacity) || st.Records != min(tc.adds, st.Capacity) {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func seqRange(from, to uint64) []uint64 {
	var out []uint64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

func TestSnapshotFilter(t *testing.T) {
	r := NewRing(16)
	for i := range 30 {
		v := Forwarded
		if i%3 == 0 {
			v = DroppedPolicy
		}
		r.Add(rec("n1", v, "TCP", "a/x", "b/y", 80))
	}
	got := r.Snapshot(Filter{Verdicts: []Verdict{DroppedPolicy}}, 3)
	if fmt.Sprint(seqs(got)) != "[22 25 28]" {
		t.Errorf("dropped, newest 3: %v", seqs(got))
	}
	if got := r.Snapshot(Filter{Namespaces: []string{"nowhere"}}, 100); len(got) != 0 {
		t.Errorf("a namespace without records: %v", seqs(got))
	}
}

// TestSubscribeNeverBlocks: a subscriber that never reads costs Add
// nothing but drops, counted for it and in total, and holds no more than
// its buffer; one that reads gets every record, in order.
func TestSubscribeNeverBlocks(t *testing.T) {
	r := NewRing(64)
	stuck := r.Subscribe(Filter{}, 4)
	dropOnly := r.Subscribe(Filter{Verdicts: []Verdict{DroppedPolicy}}, 1000)
	reader := r.Subscribe(Filter{}, 8)
	var got []uint64
	var wg sync.WaitGroup
	wg.Go(func() {
		for rec := range reader.Records() {
			got = append(got, rec.Seq)
		}
	})
	const n = 1000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range n {
			r.Add(rec("n1", Forwarded, "TCP", "a/x", "b/y", 80))
			// Leave the reader time to keep up, so that it drops none.
			for len(reader.ch) > 4 {
				runtime.Gosched()
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Add blocked on a subscriber that never reads")
	}
	reader.Close()
	wg.Wait()
	if len(got) != n || got[0] != 1 || got[n-1] != n {
		t.Errorf("reader got %d records (%v...)", len(got), got[:min(len(got), 3)])
	}
	if stuck.Dropped() != n-4 || len(stuck.ch) != 4 {
		t.Errorf("stuck subscriber: %d dropped, %d buffered", stuck.Dropped(), len(stuck.ch))
	}
	if dropOnly.Dropped() != 0 || len(dropOnly.ch) != 0 {
		t.Errorf("a filter matching nothing: %d dropped, %d buffered", dropOnly.Dropped(), len(dropOnly.ch))
	}
	if r.Dropped() != n-4 {
		t.Errorf("ring dropped %d, want %d", r.Dropped(), n-4)
	}
	stuck.Close()
	stuck.Close()
	dropOnly.Close()
	if st := r.Stats(); st.Subscribers != 0 {
		t.Errorf("%d subscriptions after Close", st.Subscribers)
	}
	// The closed channel still gives what was buffered, then ends.
	k := 0
	for range stuck.Records() {
		k++
	}
	if k != 4 {
		t.Errorf("closed subscription gave %d buffered records", k)
	}
}

// TestRingMemory measures what a full ring of the default capacity
// holds, with every record's strings and rule its own allocation (the
// worst case), and states it in bytes per record (Ring's doc comment).
func TestRingMemory(t *testing.T) {
	const capacity = 8192
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := NewRing(capacity)
	for i := range 2 * capacity {
		r.Add(Record{Time: t0, Node: fmt.Sprintf("node-%d", i%10), Event: Start, Protocol: "TCP", Verdict: Forwarded,
			Src:   Endpoint{IP: netip.AddrFrom4([4]byte{10, 244, 1, byte(i)}), Port: 40112, Namespace: fmt.Sprintf("shop-%d", i), Pod: fmt.Sprintf("web-%d-abcde", i)},
			Dst:   Endpoint{IP: netip.AddrFrom4([4]byte{10, 244, 2, byte(i)}), Port: 5432, Namespace: fmt.Sprintf("shop-%d", i), Pod: fmt.Sprintf("db-%d", i)},
			Rules: []Rule{{Kind: "NetworkPolicy", Namespace: fmt.Sprintf("shop-%d", i), Name: "db-allow-web", Direction: "ingress", Action: "Allow"}}})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / capacity
	t.Logf("ring of %d: %.0f bytes a record (slot %d bytes), %.1f MiB", capacity, per, unsafe.Sizeof(Record{}), per*capacity/(1<<20))
	if per > 800 {
		t.Errorf("%.0f bytes a record, more than the 800 the docs allow", per)
	}
	runtime.KeepAlive(r)
}

// BenchmarkAdd adds records to a ring with 4 subscriptions whose readers
// drain them.
func BenchmarkAdd(b *testing.B) {
	r := NewRing(8192)
	var wg sync.WaitGroup
	for i := range 4 {
		f := Filter{}
		if i%2 == 1 {
			f = Filter{Namespaces: []string{"shop"}, Verdicts: []Verdict{DroppedPolicy}}
		}
		s := r.Subscribe(f, 1024)
		defer s.Close()
		wg.Go(func() {
			for range s.Records() {
			}
		})
	}
	x := rec("n1", Forwarded, "TCP", "shop/web-1", "shop/db-0", 5432, Rule{Kind: "NetworkPolicy", Namespace: "shop", Name: "db", Direction: "ingress", Action: "Allow"})
	b.ReportAllocs()
	for b.Loop() {
		r.Add(x)
	}
	b.StopTimer()
	b.ReportMetric(float64(r.Dropped())/float64(b.N), "dropped/op")
}
