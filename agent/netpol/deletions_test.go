package netpol

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	itestutil "github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/policy"
)

// TestPodDeletionsBatched: pods deleted one after another are taken out
// in one rebuild, DeleteDebounce after the first, not one each; a pod
// admitted meanwhile with a new address is answered the fast way and the
// deletions stay for their batch; one given a deleted pod's address
// takes a compile, whose IR has the deleted pods out; and a deleted pod
// whose address another pod already has is taken out at once.
func TestPodDeletionsBatched(t *testing.T) {
	c := newCluster(t)
	c.addNamespace("x", nil)
	c.addPolicy(denyFrom("x", "db", "db", "web"))
	for i, name := range []string{"web1", "web2", "web3", "web4"} {
		c.addPod(apiPod("x", name, "n2", map[string]string{"app": "web"}, netip.AddrFrom4([4]byte{10, 244, 1, byte(i + 1)}).String()))
	}
	c.addPod(apiPod("x", "db1", self, map[string]string{"app": "db"}))
	c.addPod(apiPod("x", "db2", self, map[string]string{"app": "db"}))
	r := newRecorder()
	const batch = 300 * time.Millisecond
	s := startService(t, c, r, Config{Debounce: time.Millisecond, DeleteDebounce: batch})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	itestutil.Eventually(t, "an IR of the caches as they are", 5*time.Second, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.ir != nil && s.clusterPolicies != nil && s.irGen == s.cacheGen.Load() && len(peerAddrs(s.ir)) == 4
	})
	compiles, fast := applyCounts(t, s)
	peers := func() []netip.Addr { return peerAddrs(r.last()) }

	c0 := compiles()
	start := time.Now()
	c.deletePod("x", "web1")
	c.deletePod("x", "web2")
	itestutil.Eventually(t, "both deletions in the caches", 5*time.Second, func() bool { return len(s.pods.List()) == 4 })
	if sel, err := s.Admit(ctx, "x", "db1", []netip.Addr{addr("10.244.0.9")}); err != nil || !sel {
		t.Fatalf("Admit(db1) = %v, %v", sel, err)
	}
	if compiles() != c0 || fast() == 0 {
		t.Fatalf("a new address while deletions wait: compiles %d -> %d, fast applies %d; want the fast way", c0, compiles(), fast())
	}
	if got := peers(); len(got) != 4 {
		t.Fatalf("peers %v right after the deletions: want them left for their batch", got)
	}
	r.waitIR(t, "web1 and web2 out", func(ir *policy.IR) bool { return len(peerAddrs(ir)) == 2 })
	if took := time.Since(start); took < batch {
		t.Errorf("the deletions were taken out after %v, before their batch (%v)", took, batch)
	}
	if got := compiles() - c0; got != 1 {
		t.Errorf("%d compiles for two deletions, want one", got)
	}

	// A deleted pod's address given to a new pod: the compile, at once,
	// and the deleted pod is out of it.
	c1 := compiles()
	c.deletePod("x", "web3")
	itestutil.Eventually(t, "web3's deletion handled", 5*time.Second, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.deletedPending([]netip.Addr{addr("10.244.1.3")})
	})
	begin := time.Now()
	if sel, err := s.Admit(ctx, "x", "db2", []netip.Addr{addr("10.244.1.3")}); err != nil || !sel {
		t.Fatalf("Admit(db2) = %v, %v", sel, err)
	}
	ir := r.last()
	if compiles() != c1+1 || slices.Contains(peerAddrs(ir), addr("10.244.1.3")) || time.Since(begin) >= batch {
		t.Fatalf("db2 given web3's address: compiles %d -> %d after %v, peers %v; want one compile at once, web3 out",
			c1, compiles(), time.Since(begin), peerAddrs(ir))
	}

	// db1 given web4's address while web4 still has it; then web4 goes:
	// no batch, db1 must not keep web4's place.
	if sel, err := s.Admit(ctx, "x", "db1", []netip.Addr{addr("10.244.1.4")}); err != nil || !sel {
		t.Fatalf("Admit(db1) = %v, %v", sel, err)
	}
	begin = time.Now()
	c.deletePod("x", "web4")
	r.waitIR(t, "web4 out", func(ir *policy.IR) bool { return len(peerAddrs(ir)) == 0 })
	if took := time.Since(begin); took >= batch {
		t.Errorf("web4, whose address db1 has, was taken out after %v: batched (%v)", took, batch)
	}
}
