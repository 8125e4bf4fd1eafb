package wireguard

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// TestKicks: of two keys exactly one side kicks, whichever way round
// it is asked, and never both for a key against itself.
func TestKicks(t *testing.T) {
	for range 50 {
		a, b := mustKey(t), mustKey(t)
		if Kicks(a, b) == Kicks(b, a) {
			t.Fatalf("keys %s and %s: both or neither kick", a, b)
		}
	}
	lo, hi := wgtypes.Key{1}, wgtypes.Key{2}
	if !Kicks(lo, hi) || Kicks(hi, lo) || Kicks(lo, lo) {
		t.Errorf("the lower key kicks, the higher does not, nor a key itself")
	}
}

// TestAddedPeers: a new node's key is added; a node's new key (its old
// key's peer, same endpoint, removed), a peer only changed (allowed IPs)
// or removed is not.
func TestAddedPeers(t *testing.T) {
	kkept, kold, knew, kjoin := mustKey(t), mustKey(t), mustKey(t), mustKey(t)
	ep := &net.UDPAddr{IP: net.ParseIP("198.18.0.12"), Port: 51871}
	ep2 := &net.UDPAddr{IP: net.ParseIP("198.18.0.13"), Port: 51871}
	ep3 := &net.UDPAddr{IP: net.ParseIP("198.18.0.14"), Port: 51871}
	have := []wgtypes.Peer{{PublicKey: kkept, Endpoint: ep}, {PublicKey: kold, Endpoint: ep2}}
	changes := []wgtypes.PeerConfig{
		{PublicKey: kkept, Endpoint: ep, ReplaceAllowedIPs: true},
		{PublicKey: knew, Endpoint: ep2, ReplaceAllowedIPs: true},
		{PublicKey: kjoin, Endpoint: ep3, ReplaceAllowedIPs: true},
		{PublicKey: kold, Remove: true},
	}
	got := AddedPeers(have, changes)
	if len(got) != 1 || got[0] != kjoin {
		t.Errorf("added %v; want only %v", got, kjoin)
	}
}

// TestHandshakeRetry: started, it restarts at once, then with a
// doubling wait, until no peer waits; started again while running it
// keeps its earlier since and restarts at once; past its time it stops.
func TestHandshakeRetry(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var sinces []time.Time
	waiting := 1
	restart := func(t time.Time) (int, error) { sinces = append(sinces, t); return waiting, nil }
	h := handshakeRetry{what: "new"}
	if _, ok := h.step(restart, log); ok || len(sinces) != 0 {
		t.Fatal("not started: want nothing done")
	}
	t0 := time.Now().Add(-time.Second)
	h.start(t0)
	d1, ok := h.step(restart, log)
	if !ok || len(sinces) != 1 || !sinces[0].Equal(t0) || d1 > handshakeRetryFirst {
		t.Fatalf("first step: ok %v, restarts %v, next in %v; want a restart since t0 at once, the next in %v", ok, sinces, d1, handshakeRetryFirst)
	}
	if d, ok := h.step(restart, log); !ok || len(sinces) != 1 || d <= 0 {
		t.Fatalf("before the wait: ok %v, restarts %d; want none", ok, len(sinces))
	}
	h.start(t0.Add(500 * time.Millisecond))
	if _, ok := h.step(restart, log); !ok || len(sinces) != 2 || !sinces[1].Equal(t0) {
		t.Fatalf("started again: restarts %v; want one at once, since the earlier t0", sinces)
	}
	h.next = time.Time{}
	waiting = 0
	if _, ok := h.step(restart, log); ok || !h.since.IsZero() {
		t.Fatal("no peer waits: want the retry ended")
	}
	waiting = 1
	h.start(time.Now().Add(-time.Minute))
	h.until = time.Now().Add(-time.Second)
	if _, ok := h.step(restart, log); ok {
		t.Fatal("past its time: want the retry ended")
	}
	errs := func(time.Time) (int, error) { return 0, errors.New("device gone") }
	h.start(time.Now())
	if _, ok := h.step(errs, log); !ok {
		t.Error("an error: want the retry to go on")
	}
}
