package netpol

import (
	"context"
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"

	itestutil "github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/policy"
)

// TestAdmitFastWay: Admit of pods whose sandbox brings addresses, when
// nothing else changed, is answered from the last IR with the addresses
// added (no compile), new ones replacing old ones; an old address another
// pod holds, or a change of the caches, takes a compile; and the IR a
// compile makes afterwards is the one the fast way had.
func TestAdmitFastWay(t *testing.T) {
	c := newCluster(t)
	c.addNamespace("x", nil)
	c.addPolicy(denyFrom("x", "db", "db", "web"))
	c.addPod(apiPod("x", "web1", "n2", map[string]string{"app": "web"}, "10.244.1.1"))
	for _, name := range []string{"db1", "db2"} {
		c.addPod(apiPod("x", name, self, map[string]string{"app": "db"}))
	}
	c.addPod(apiPod("x", "web2", self, map[string]string{"app": "web"}))
	r := newRecorder()
	s := startService(t, c, r, Config{Debounce: time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	select {
	case <-s.FirstApplied():
	case <-ctx.Done():
		t.Fatal("no first apply")
	}
	// The informers' first events come after the first apply: wait for
	// the rebuild they ask for.
	itestutil.Eventually(t, "an IR of the caches as they are", 5*time.Second, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.irGen == s.cacheGen.Load() && s.appliedGen == s.reqGen.Load()
	})
	compiles, fast := applyCounts(t, s)
	admit := func(name string, want bool, ips ...string) {
		t.Helper()
		var addrs []netip.Addr
		for _, ip := range ips {
			addrs = append(addrs, addr(ip))
		}
		if sel, err := s.Admit(ctx, "x", name, addrs); err != nil || sel != want {
			t.Fatalf("Admit(%s, %v) = %v, %v; want selected %v", name, ips, sel, err, want)
		}
	}
	has := func(ir *policy.IR, name, ip string) bool {
		pr := podRules(ir, "x", name)
		return pr != nil && slices.Contains(pr.IPs, addr(ip))
	}
	c0, f0 := compiles(), fast()

	admit("db1", true, "10.244.0.9")
	admit("web2", false, "10.244.0.20") // a peer, not selected: its apply not waited for
	admit("db2", true, "10.244.0.11")
	ir := r.last()
	if !has(ir, "db1", "10.244.0.9") || !has(ir, "db2", "10.244.0.11") || !slices.Contains(peerAddrs(ir), addr("10.244.0.20")) {
		t.Fatalf("IR after the admissions: %+v", ir)
	}
	if compiles() != c0 || fast() < f0+2 {
		t.Fatalf("compiles %d -> %d, fast applies %d -> %d; want no compile, 2 or 3 fast", c0, compiles(), f0, fast())
	}

	admit("db1", true, "10.244.0.30") // its sandbox made again
	ir = r.last()
	if !has(ir, "db1", "10.244.0.30") || has(ir, "db1", "10.244.0.9") || compiles() != c0 {
		t.Fatalf("db1 given a new address: compiles %d -> %d, IR %+v", c0, compiles(), ir)
	}

	admit("db1", true, "10.244.0.11") // db2's: both hold it
	admit("db2", true, "10.244.0.40") // its old one is db1's too: a compile
	ir = r.last()
	if !has(ir, "db1", "10.244.0.11") || !has(ir, "db2", "10.244.0.40") || compiles() != c0+1 {
		t.Fatalf("an old address another pod holds: compiles %d -> %d, IR %+v", c0, compiles(), ir)
	}

	admit("db2", true, "10.244.0.41")
	fastIR := r.last()
	c.addNamespace("unrelated", nil) // a change: the next IR is compiled
	full := r.waitIR(t, "a compiled IR", func(ir *policy.IR) bool { return ir != fastIR })
	if compiles() != c0+2 {
		t.Fatalf("compiles %d -> %d, want 2", c0, compiles())
	}
	for _, f := range []string{"Pods", "PeerSets", "NamedPortSets"} {
		a, b := reflect.ValueOf(*fastIR).FieldByName(f).Interface(), reflect.ValueOf(*full).FieldByName(f).Interface()
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: the fast way's\n%+v\nthe compile's\n%+v", f, a, b)
		}
	}
}
