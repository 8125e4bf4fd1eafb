package wireguard

import (
	"bytes"
	"log/slog"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Kicks says whether this node, with public key self, is the one that
// starts the handshakes with the node whose public key is peer, when
// the two nodes are new to each other (a node joins, encryption is
// turned on): the side whose key sorts lower. (On a key change the node
// whose key changed kicks: AddedPeers.) Both sides know
// both keys, so they agree without talking, and exactly one kicks: two
// handshakes sent at once cross (each side's answer to the other's
// overwrites the state its own was waiting in, so each drops the
// other's answer) and WireGuard retries only after 5 s.
func Kicks(self, peer wgtypes.Key) bool {
	return bytes.Compare(self[:], peer[:]) < 0
}

// AddedPeers are the keys of nodes that changes make new to a device
// whose peers are have: a node joining, or encryption turned on on it.
// A node's new key (added with the endpoint of a peer the same changes
// remove: its old key) is not: the node whose key changed restarts
// the handshakes (Service.Run), and this side starting its own too
// would cross them.
func AddedPeers(have []wgtypes.Peer, changes []wgtypes.PeerConfig) []wgtypes.Key {
	cur := make(map[wgtypes.Key]bool, len(have))
	for _, p := range have {
		cur[p.PublicKey] = true
	}
	replaced := map[string]bool{}
	for _, c := range changes {
		if c.Remove {
			for _, p := range have {
				if p.PublicKey == c.PublicKey && p.Endpoint != nil {
					replaced[p.Endpoint.String()] = true
				}
			}
		}
	}
	var out []wgtypes.Key
	for _, c := range changes {
		if c.Remove || c.UpdateOnly || cur[c.PublicKey] || c.Endpoint != nil && replaced[c.Endpoint.String()] {
			continue
		}
		out = append(out, c.PublicKey)
	}
	return out
}

// handshakeRetry restarts the handshakes of the peers that have had none
// since a moment (a new key on the device, peers added), with a
// doubling wait, until each has (Service.handshakes), or until
// handshakeRetryFor has passed since the last time it was started.
type handshakeRetry struct {
	what  string    // the peers, for the log
	since time.Time // zero: nothing to do
	until time.Time
	wait  time.Duration
	next  time.Time
}

// start makes the retry begin again now, for peers that have had no
// handshake since t: at once, then with the first wait. Already
// running, it keeps its earlier since (the peers it waits for have had
// none since then either).
func (h *handshakeRetry) start(t time.Time) {
	if h.since.IsZero() || t.Before(h.since) {
		h.since = t
	}
	h.until = t.Add(handshakeRetryFor)
	h.wait, h.next = handshakeRetryFirst, time.Time{}
}

// step restarts the handshakes if it is time, and says how long to wait
// for the next step (ok false: none is due).
func (h *handshakeRetry) step(restart func(time.Time) (int, error), log *slog.Logger) (time.Duration, bool) {
	if h.since.IsZero() {
		return 0, false
	}
	now := time.Now()
	if now.Before(h.next) {
		return h.next.Sub(now), true
	}
	n, err := restart(h.since)
	switch {
	case err != nil:
		log.Warn("wireguard: restarting handshakes", "peers", h.what, "err", err)
	case n == 0:
		log.Info("wireguard: every peer has a session", "peers", h.what, "after", now.Sub(h.since).Round(time.Millisecond))
		h.since = time.Time{}
		return 0, false
	}
	if now.After(h.until) {
		log.Warn("wireguard: peers without a session; WireGuard keeps trying them every 5 s",
			"peers", h.what, "count", n, "after", now.Sub(h.since).Round(time.Millisecond))
		h.since = time.Time{}
		return 0, false
	}
	h.next = now.Add(h.wait)
	h.wait = min(2*h.wait, handshakeRetryMax)
	return h.next.Sub(now), true
}
