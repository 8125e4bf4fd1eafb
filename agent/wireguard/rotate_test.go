package wireguard

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// fakePublisher is a datastore that has what was published once
// arrive is set.
type fakePublisher struct {
	asked, has string
	calls      []string // "publish" and "set", in order
}

func (p *fakePublisher) Publish(key string) { p.asked = key; p.calls = append(p.calls, "publish") }
func (p *fakePublisher) Published() string  { return p.has }

// TestKeyWatch: a new key in the file is published first and set on the
// device only once the datastore has it; an unchanged file does
// nothing; a file that became bad is an error naming it, the device
// keeping its key; a device that refuses the key is an error, tried
// again at the next check.
func TestKeyWatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wireguard.key")
	old, _, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	pub := &fakePublisher{has: old.PublicKey().String()}
	var onDevice []wgtypes.Key
	var refuse error
	w := &keyWatch{file: path, current: old, publisher: pub, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		setKey: func(k wgtypes.Key) error {
			pub.calls = append(pub.calls, "set")
			if refuse != nil {
				return refuse
			}
			onDevice = append(onDevice, k)
			return nil
		}}
	now := time.Now()
	if soon, err := w.check(now); err != nil || soon || len(pub.calls) != 0 {
		t.Fatalf("unchanged file: %v, soon %v, calls %v; want nothing done", err, soon, pub.calls)
	}
	key, err := RotateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	newPub := key.PublicKey().String()
	if soon, err := w.check(now); err != nil || !soon || pub.asked != newPub || len(onDevice) != 0 {
		t.Fatalf("new key: %v, soon %v, asked %q, on device %v; want it published, not yet on the device", err, soon, pub.asked, onDevice)
	}
	if soon, err := w.check(now); err != nil || !soon || len(pub.calls) != 1 {
		t.Fatalf("not yet in the record: %v, soon %v, calls %v; want a wait, published once", err, soon, pub.calls)
	}
	pub.has = newPub
	refuse = errors.New("device gone")
	if _, err := w.check(now); err == nil || !strings.Contains(err.Error(), "device gone") || len(onDevice) != 0 {
		t.Fatalf("device refuses: %v; want its error", err)
	}
	refuse = nil
	if soon, err := w.check(now); err != nil || soon || len(onDevice) != 1 || onDevice[0] != key || w.current != key {
		t.Fatalf("in the record: %v, soon %v, on device %v; want the new key set", err, soon, onDevice)
	}
	if got := strings.Join(pub.calls, ","); got != "publish,set,set" {
		t.Errorf("calls %s; want publish before set", got)
	}
	if err := os.WriteFile(path, []byte("garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = w.check(now)
	var ke *KeyError
	if !errors.As(err, &ke) || !strings.Contains(err.Error(), path) || len(onDevice) != 1 || pub.asked != newPub {
		t.Fatalf("bad file: %v; want a KeyError naming %s, nothing published or set", err, path)
	}
	if err := os.WriteFile(path, []byte(key.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := w.check(now); err != nil {
		t.Fatalf("file fixed: %v", err)
	}
}

// TestKeyWatchSecondRotation: a key replaced again before the first was
// published is the one published and set.
func TestKeyWatchSecondRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wireguard.key")
	old, _, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	pub := &fakePublisher{has: old.PublicKey().String()}
	var set wgtypes.Key
	w := &keyWatch{file: path, current: old, publisher: pub, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		setKey: func(k wgtypes.Key) error { set = k; return nil }}
	if _, err := RotateKey(path); err != nil {
		t.Fatal(err)
	}
	w.check(time.Now())
	second, err := RotateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	w.check(time.Now())
	if pub.asked != second.PublicKey().String() {
		t.Fatalf("published %q; want the second key's", pub.asked)
	}
	pub.has = pub.asked
	if _, err := w.check(time.Now()); err != nil || set != second {
		t.Fatalf("%v; want the second key on the device", err)
	}
}
