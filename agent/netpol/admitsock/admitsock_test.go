package admitsock

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podnet/podnet/internal/wire"
)

func testPod() Pod {
	return Pod{Namespace: "x", Name: "db", ContainerID: "c0ffee", IfName: "eth0", HostIf: "pn0123456789a",
		Addrs: []netip.Addr{netip.MustParseAddr("10.244.0.9"), netip.MustParseAddr("fd00::9")}}
}

// serve runs Serve with h on a socket in a temporary directory until the
// test ends, and returns the socket's path.
func serve(t testing.TB, h Handler, o Options) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, l, h, o) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return path
}

func TestWireRoundTrip(t *testing.T) {
	for _, p := range []Pod{testPod(), {Namespace: "a", Name: "b"}, {Namespace: strings.Repeat("n", 63), Name: strings.Repeat("p", 253),
		Addrs: []netip.Addr{netip.MustParseAddr("::ffff:10.0.0.1")}}} {
		b, err := encodeRequest(request{version: version, deadline: 42, pod: p})
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeRequest(b[4:])
		if err != nil {
			t.Fatal(err)
		}
		want := p
		for i, a := range want.Addrs {
			want.Addrs[i] = a.Unmap() // sent unmapped
		}
		if got.deadline != 42 || !reflect.DeepEqual(got.pod, want) {
			t.Errorf("round trip of %+v: %+v", p, got)
		}
	}
	for _, tc := range []struct {
		st  byte
		msg string
	}{{statusNotSelected, ""}, {statusSelected, ""}, {statusFailed, "boom"}, {statusUnsupported, "v9"}} {
		st, msg, err := decodeAnswer(encodeAnswer(tc.st, tc.msg)[4:])
		if err != nil || st != tc.st || msg != tc.msg {
			t.Errorf("answer %d %q: %d %q %v", tc.st, tc.msg, st, msg, err)
		}
	}
}

func TestWireRefusesGarbage(t *testing.T) {
	good, _ := encodeRequest(request{version: version, pod: testPod()})
	body := good[4:]
	for i := 1; i < len(body); i++ {
		if _, err := decodeRequest(body[:i]); err == nil {
			t.Fatalf("truncated request of %d bytes decoded", i)
		}
	}
	if _, err := decodeRequest(append(append([]byte(nil), body...), 0)); err == nil {
		t.Error("request with a trailing byte decoded")
	}
	if _, err := encodeRequest(request{version: version, pod: Pod{Addrs: make([]netip.Addr, maxAddrs+1)}}); err == nil {
		t.Error("request with too many addresses encoded")
	}
}

// TestAsk: the answers, the errors' kinds, and the deadline reaching the
// handler.
func TestAsk(t *testing.T) {
	var gotDeadline atomic.Int64
	path := serve(t, func(ctx context.Context, p Pod) (bool, error) {
		if dl, ok := ctx.Deadline(); ok {
			gotDeadline.Store(dl.UnixNano())
		}
		switch p.Name {
		case "selected":
			return true, nil
		case "failing":
			return false, errors.New("pod not in the agent's cache")
		case "slow":
			<-ctx.Done()
			return false, ctx.Err()
		}
		return false, nil
	}, Options{MaxWait: time.Second})
	ask := func(name string, timeout time.Duration) (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		p := testPod()
		p.Name = name
		return Ask(ctx, path, p)
	}
	if sel, err := ask("selected", time.Second); err != nil || !sel {
		t.Errorf("selected pod: %v %v", sel, err)
	}
	if dl := time.Unix(0, gotDeadline.Load()); time.Until(dl) > time.Second || time.Until(dl) < 0 {
		t.Errorf("handler's deadline %v, want the caller's", dl)
	}
	if sel, err := ask("web", time.Second); err != nil || sel {
		t.Errorf("unselected pod: %v %v", sel, err)
	}
	_, err := ask("failing", time.Second)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "not in the agent's cache") || !strings.Contains(err.Error(), "x/failing") {
		t.Errorf("failing handler: %v, want ErrRefused with its message and the pod", err)
	}
	start := time.Now()
	_, err = ask("slow", 100*time.Millisecond)
	if !errors.Is(err, ErrRefused) && !errors.Is(err, ErrNoAnswer) {
		t.Errorf("slow handler: %v, want no answer or a refusal", err)
	}
	if d := time.Since(start); d > 600*time.Millisecond {
		t.Errorf("slow handler: Ask took %v, past its deadline", d)
	}
	p := testPod()
	if _, err := Ask(context.Background(), filepath.Join(t.TempDir(), "none.sock"), p); !errors.Is(err, ErrUnreachable) {
		t.Errorf("no socket: %v, want ErrUnreachable", err)
	}
	// A server that takes the connection and never answers.
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "mute.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := Ask(ctx, l.Addr().String(), p); !errors.Is(err, ErrNoAnswer) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("mute server: %v, want ErrNoAnswer with the deadline", err)
	}
}

// TestServerVersion: a request of another version is refused, named.
func TestServerVersion(t *testing.T) {
	path := serve(t, func(context.Context, Pod) (bool, error) { return true, nil }, Options{})
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, _ := encodeRequest(request{version: version + 1, pod: testPod()})
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	a, err := wire.ReadFrame(c, nil, maxAnswer)
	if err != nil {
		t.Fatal(err)
	}
	st, msg, err := decodeAnswer(a)
	if err != nil || st != statusUnsupported || !strings.Contains(msg, "version 2") {
		t.Errorf("answer to version 2: %d %q %v", st, msg, err)
	}
}

func TestListenMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("socket %v, %v: want a 0600 socket", fi.Mode(), err)
	}
	l.Close()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("socket left after Close: %v", err)
	}
}

// BenchmarkAsk is the handshake's round trip, as ADD waits for it, with
// a handler that answers at once: what a pod no policy selects costs
// ADD on top of the agent's cache lookup.
func BenchmarkAsk(b *testing.B) {
	path := serve(b, func(context.Context, Pod) (bool, error) { return false, nil }, Options{})
	p := testPod()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Ask(ctx, path, p); err != nil {
			b.Fatal(err)
		}
	}
}
