package wireguard

import (
	"fmt"
	"log/slog"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/podnet/podnet/agent/route"
)

const (
	// DefaultKeyCheckInterval is how often the running agent reads its
	// key file for a new key (podnet wireguard rotate-key).
	DefaultKeyCheckInterval = time.Second
	// publishPoll is how often the agent looks for its new public key in
	// its view of the datastore once it asked for it to be published:
	// the device takes the key as soon as the peers can know it.
	publishPoll = 5 * time.Millisecond
	// publishSlow is how long a new key may wait for publication before
	// the wait is logged.
	publishSlow = 10 * time.Second
	// kickInterval is the persistent keepalive set for a moment to make
	// the device send a handshake at once (RestartHandshakes); any
	// non-zero value does.
	kickInterval = 25 * time.Second
	// handshakeRetryFirst is the wait before the first restart of the
	// handshakes after a key change (the peers are seeing the new key
	// then); it doubles up to handshakeRetryMax, always well above a
	// handshake's round trip so that no restart cuts one short, and the
	// restarts stop after handshakeRetryFor, when WireGuard's own 5 s
	// retries carry on.
	handshakeRetryFirst = 20 * time.Millisecond
	handshakeRetryMax   = 2 * time.Second
	handshakeRetryFor   = 15 * time.Second
)

// Publisher is where the node's public key goes: the node's record,
// which the datastore's source registers.
type Publisher interface {
	// Publish asks for key to be the public key in the node's record.
	Publish(key string)
	// Published is the public key in the node's record as the
	// datastore has it (the agent's view of it).
	Published() string
}

// keyWatch follows the key file of a running device. A new key in it
// is published first and set on the device only once the datastore has
// it: from then the peers are taking the new key as the device is, and
// each side sends a handshake at once after its change, so the gap is
// the time between the two, not a handshake retry's 5 s. A file that
// became unreadable or holds no key leaves the device on the key it has
// (still published, so traffic flows encrypted) and is reported as not
// ready, naming the file; it is never replaced.
type keyWatch struct {
	file      string
	current   wgtypes.Key
	publisher Publisher
	// setKey puts a key on the device.
	setKey func(wgtypes.Key) error
	log    *slog.Logger

	pending    *wgtypes.Key // published, not yet on the device
	since      time.Time    // when pending was found
	rotated    time.Time    // when current was set on the device
	slowLogged bool
	lastErr    string
}

// check reads the key file once at now, and moves a new key one step:
// published, then on the device. err is what readiness says (nil: all is
// well); soon says a new key waits for its publication, to be checked
// again in publishPoll rather than the usual interval.
func (w *keyWatch) check(now time.Time) (soon bool, err error) {
	defer func() { w.logErr(err) }()
	key, err := ReadKey(w.file)
	if err != nil {
		return false, fmt.Errorf("%w (%s keeps running on the key it has, still published)", err, "podnet.wg")
	}
	if key == w.current {
		w.pending = nil
		return false, nil
	}
	pub := key.PublicKey().String()
	if w.pending == nil || *w.pending != key {
		w.pending, w.since, w.slowLogged = &key, now, false
		w.publisher.Publish(pub)
		w.log.Info("wireguard key changed in its file; publishing the new public key before the device takes it",
			"file", w.file, "public_key", pub, "old_public_key", w.current.PublicKey().String())
	}
	if w.publisher.Published() != pub {
		if now.Sub(w.since) > publishSlow && !w.slowLogged {
			w.slowLogged = true
			w.log.Warn("wireguard: the new public key is not in the node's record yet; the device keeps the old key meanwhile",
				"public_key", pub, "waited", now.Sub(w.since).Round(time.Millisecond))
		}
		return true, nil
	}
	at := time.Now()
	if err := w.setKey(key); err != nil {
		// Published but not on the device: the peers refuse this node
		// until it is (never clear). Tried again at the next check.
		return false, fmt.Errorf("wireguard: set the new key from %s on %s: %w", w.file, route.WireGuardDevice, err)
	}
	w.log.Info("wireguard key rotated", "public_key", pub, "old_public_key", w.current.PublicKey().String(),
		"published_after", now.Sub(w.since).Round(time.Millisecond))
	w.current, w.pending, w.rotated = key, nil, at
	return false, nil
}

// logErr logs a new error of the key file, or its end, once.
func (w *keyWatch) logErr(err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	switch {
	case msg == w.lastErr:
	case err != nil:
		w.log.Error("wireguard not ready", "err", err)
	default:
		w.log.Info("wireguard key file usable again", "file", w.file)
	}
	w.lastErr = msg
}

// handshakeRetry restarts the handshakes of the peers that have had none
// since the device took a new key, with a doubling wait, until each has
// (Service.handshakes).
type handshakeRetry struct {
	since time.Time // the device took the key; zero: nothing to do
	wait  time.Duration
	next  time.Time
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
		log.Warn("wireguard: restarting handshakes after the key change", "err", err)
	case n == 0:
		log.Info("wireguard: every peer has a session under the new key", "after", now.Sub(h.since).Round(time.Millisecond))
		h.since = time.Time{}
		return 0, false
	}
	if now.Sub(h.since) > handshakeRetryFor {
		log.Warn("wireguard: peers without a session under the new key; WireGuard keeps trying them every 5 s",
			"peers", n, "after", now.Sub(h.since).Round(time.Millisecond))
		h.since = time.Time{}
		return 0, false
	}
	h.next = now.Add(h.wait)
	h.wait = min(2*h.wait, handshakeRetryMax)
	return h.next.Sub(now), true
}
