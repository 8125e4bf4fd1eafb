package netpol

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	itestutil "github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/policy"
)

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// TestEventsToSnapshot follows a policy through its life: the IR applied
// after each event is what the cluster then says.
func TestEventsToSnapshot(t *testing.T) {
	c := newCluster(t)
	c.addNamespace("x", map[string]string{"team": "blue"})
	c.addNode(self, "198.18.0.1")
	c.addNode("n2", "198.18.0.2")
	c.addPod(apiPod("x", "db", self, map[string]string{"app": "db"}, "10.244.0.2"))
	web := apiPod("x", "web", "n2", map[string]string{"app": "web"}, "10.244.1.2", "fd00::1:2")
	c.addPod(web)
	c.addPod(apiPod("x", "db-remote", "n2", map[string]string{"app": "db"}, "10.244.1.3"))
	r := newRecorder()
	s := startService(t, c, r, Config{}, addr("192.0.2.1"))

	ir := r.waitIR(t, "a first apply", func(*policy.IR) bool { return true })
	if len(ir.Pods) != 0 {
		t.Fatalf("pods isolated without policies: %+v", ir.Pods)
	}
	want := []policy.Node{{Name: self, IPs: []netip.Addr{addr("192.0.2.1"), addr("198.18.0.1")}}, {Name: "n2", IPs: []netip.Addr{addr("198.18.0.2")}}}
	if !slices.EqualFunc(ir.Nodes, want, func(a, b policy.Node) bool {
		return a.Name == b.Name && slices.Equal(a.IPs, b.IPs)
	}) {
		t.Errorf("nodes %+v, want %+v (this Node's addresses and the namespace's; the other's as they are, for nodes peers)", ir.Nodes, want)
	}
	<-s.FirstApplied() // the renderer sees the IR before the service records its apply
	if err := s.Ready(); err != nil {
		t.Errorf("Ready after the first apply: %v", err)
	}

	c.addPolicy(denyFrom("x", "db", "db", "web"))
	ir = r.waitIR(t, "x/db isolated", func(ir *policy.IR) bool { return podRules(ir, "x", "db") != nil })
	if len(ir.Pods) != 1 {
		t.Errorf("isolated %+v, want only x/db (db-remote is another node's)", ir.Pods)
	}
	if got := peerAddrs(ir); !slices.Equal(got, []netip.Addr{addr("10.244.1.2"), addr("fd00::1:2")}) {
		t.Errorf("peers %v, want web's addresses", got)
	}

	// web loses its label: the peer set empties.
	web.Labels = map[string]string{"app": "other"}
	c.updatePod(web)
	r.waitIR(t, "web no longer a peer", func(ir *policy.IR) bool { return podRules(ir, "x", "db") != nil && len(peerAddrs(ir)) == 0 })

	// A new web pod anywhere becomes a peer.
	c.addPod(apiPod("x", "web2", "n3", map[string]string{"app": "web"}, "10.244.2.2"))
	r.waitIR(t, "web2 a peer", func(ir *policy.IR) bool { return slices.Equal(peerAddrs(ir), []netip.Addr{addr("10.244.2.2")}) })

	c.deletePolicy("x", "db")
	r.waitIR(t, "nothing isolated", func(ir *policy.IR) bool { return len(ir.Pods) == 0 && len(ir.PeerSets) == 0 })

	c.addPolicy(denyFrom("x", "deny", "db", ""))
	r.waitIR(t, "x/db isolated again", func(ir *policy.IR) bool { return podRules(ir, "x", "db") != nil })
	c.deletePod("x", "db")
	r.waitIR(t, "x/db gone", func(ir *policy.IR) bool { return len(ir.Pods) == 0 })
}

// TestStatusUpdatesCostNothing: an update of what policy does not read
// (a pod's conditions) starts no rebuild.
func TestStatusUpdatesCostNothing(t *testing.T) {
	c := newCluster(t)
	c.addNamespace("x", nil)
	p := apiPod("x", "a", self, map[string]string{"app": "a"}, "10.244.0.2")
	c.addPod(p)
	r := newRecorder()
	startService(t, c, r, Config{Debounce: time.Millisecond})
	r.waitIR(t, "a first apply", func(*policy.IR) bool { return true })
	time.Sleep(50 * time.Millisecond) // events of the initial list
	before := r.applies()
	for range 5 {
		p.Status.Conditions = append(p.Status.Conditions, p.Status.Conditions...)
		p.Status.Message = p.Status.Message + "x"
		c.updatePod(p)
	}
	time.Sleep(100 * time.Millisecond)
	if n := r.applies() - before; n != 0 {
		t.Errorf("%d applies after status-only updates, want 0", n)
	}
}

// TestDebounce: a burst of events within the debounce costs one apply
// (or two, if the burst straddles the window), not one per event.
func TestDebounce(t *testing.T) {
	c := newCluster(t)
	c.addNamespace("x", nil)
	c.addPolicy(denyFrom("x", "deny", "db", "web"))
	r := newRecorder()
	startService(t, c, r, Config{Debounce: 200 * time.Millisecond})
	r.waitIR(t, "a first apply", func(*policy.IR) bool { return true })
	time.Sleep(300 * time.Millisecond)
	before := r.applies()
	start := time.Now()
	for i := range 20 {
		c.addPod(apiPod("x", "web"+string(rune('a'+i)), "n2", map[string]string{"app": "web"}, netip.AddrFrom4([4]byte{10, 244, 1, byte(i + 1)}).String()))
	}
	c.addPod(apiPod("x", "db", self, map[string]string{"app": "db"}, "10.244.0.2"))
	r.waitIR(t, "every web pod a peer of db", func(ir *policy.IR) bool { return podRules(ir, "x", "db") != nil && len(peerAddrs(ir)) == 20 })
	// Without the debounce each event would be an apply of its own. A
	// loaded machine may deliver the burst over several windows: at most
	// one apply per window it took, and one more for the window it ended
	// in, whatever the load.
	windows := int(time.Since(start)/(200*time.Millisecond)) + 1
	if n := r.applies() - before; n > windows+1 || n > 20 {
		t.Errorf("%d applies for a burst of 21 events over %d debounce windows, want at most %d", n, windows, windows+1)
	}
}

// TestReadiness: not ready before the informers sync, while the apply
// fails (saying why), ready once an apply succeeds.
func TestReadiness(t *testing.T) {
	c := newCluster(t)
	s := New(Config{Node: self, Sources: c.sources()})
	if err := s.Ready(); err == nil || !strings.Contains(err.Error(), "not synced") {
		t.Errorf("Ready before Run: %v, want not synced", err)
	}
	r := newRecorder()
	r.fail(errors.New("netlink: boom"))
	s = startService(t, c, r, Config{})
	waitErr := func(want string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			err := s.Ready()
			if (want == "" && err == nil) || (want != "" && err != nil && strings.Contains(err.Error(), want)) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("Ready: %v, want %q", err, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitErr("policy not applied: netlink: boom")
	r.fail(nil)
	waitErr("") // the retry succeeds
	select {
	case <-s.FirstApplied():
	default:
		t.Error("FirstApplied not closed after a successful apply")
	}
}

// TestAdmit: the seam for CNI ADD.
func TestAdmit(t *testing.T) {
	c := newCluster(t)
	c.addNamespace("x", nil)
	c.addPolicy(denyFrom("x", "db", "db", "web"))
	c.addPod(apiPod("x", "web", "n2", map[string]string{"app": "web"}))
	c.addPod(apiPod("x", "db", self, map[string]string{"app": "db"})) // no address in its status yet
	r := newRecorder()
	s := startService(t, c, r, Config{Debounce: time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	t.Run("selected", func(t *testing.T) {
		sel, err := s.Admit(ctx, "x", "db", []netip.Addr{addr("10.244.0.9"), addr("::ffff:10.244.0.9")})
		if err != nil || !sel {
			t.Fatalf("Admit = %v, %v; want selected", sel, err)
		}
		// Returned only once the rules have the pod's address.
		pr := podRules(r.last(), "x", "db")
		if pr == nil || !slices.Equal(pr.IPs, []netip.Addr{addr("10.244.0.9")}) {
			t.Fatalf("rules when Admit returned: %+v, want x/db with 10.244.0.9", pr)
		}
	})
	t.Run("not selected", func(t *testing.T) {
		// Applies are held: Admit of a pod no policy selects does not
		// wait for one.
		hold := make(chan struct{})
		r.mu.Lock()
		r.hold = hold
		r.mu.Unlock()
		sel, err := s.Admit(ctx, "x", "web", []netip.Addr{addr("10.244.1.7")})
		r.mu.Lock()
		r.hold = nil
		r.mu.Unlock()
		close(hold)
		if err != nil || sel {
			t.Fatalf("Admit = %v, %v; want not selected", sel, err)
		}
		// Its address is a peer of db's rule at once, before the API
		// has it, with nothing else changing.
		r.waitIR(t, "web's admitted address a peer", func(ir *policy.IR) bool { return slices.Contains(peerAddrs(ir), addr("10.244.1.7")) })
	})
	t.Run("the API's address wins", func(t *testing.T) {
		p := apiPod("x", "db", self, map[string]string{"app": "db"}, "10.244.0.10")
		c.updatePod(p)
		r.waitIR(t, "db's own address", func(ir *policy.IR) bool {
			pr := podRules(ir, "x", "db")
			return pr != nil && slices.Equal(pr.IPs, []netip.Addr{addr("10.244.0.10")})
		})
		// The IR can be built from the new status before the update's
		// handler has dropped the admitted address: wait for it.
		itestutil.Eventually(t, "the admitted address dropped once the status has one", 5*time.Second, func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			_, kept := s.admitted[policy.PodKey{Namespace: "x", Name: "db"}]
			return !kept
		})
	})
	t.Run("pod created after the call", func(t *testing.T) {
		done := make(chan error, 1)
		go func() {
			sel, err := s.Admit(ctx, "x", "db2", []netip.Addr{addr("10.244.0.11")})
			if err == nil && !sel {
				err = errors.New("not selected")
			}
			done <- err
		}()
		time.Sleep(20 * time.Millisecond)
		c.addPod(apiPod("x", "db2", self, map[string]string{"app": "db"}))
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
	t.Run("unknown pod", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if _, err := s.Admit(ctx, "x", "nope", nil); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Admit of a pod not in the cache: %v, want a deadline", err)
		}
	})
	t.Run("failing apply", func(t *testing.T) {
		r.fail(errors.New("boom"))
		defer r.fail(nil)
		c.addPod(apiPod("x", "db3", self, map[string]string{"app": "db"}))
		ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		sel, err := s.Admit(ctx, "x", "db3", []netip.Addr{addr("10.244.0.12")})
		if !sel || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "boom") {
			t.Errorf("Admit while applies fail = %v, %v; want selected, the deadline and the apply's error", sel, err)
		}
	})
}
