package agentsock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/ipamtest"
	"github.com/podnet/podnet/ipam/store/agentsock"
	"github.com/podnet/podnet/ipam/store/bolt"
	"github.com/podnet/podnet/ipam/store/storetest"
)

// socketPath is a socket path in a directory of the test's own, short
// enough for sun_path (108 bytes) whatever the test's name.
func socketPath(t testing.TB) string {
	dir, err := os.MkdirTemp("", "agentsock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "ipam.sock")
}

func boltStore(t testing.TB) *bolt.Store {
	s, err := bolt.Open(context.Background(), bolt.Options{Path: filepath.Join(t.TempDir(), "ipam.db"), HoldOpen: true, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// served is a running server and the socket it serves on.
type served struct {
	srv     *agentsock.Server
	path    string
	accepts *atomic.Int64
	stop    func()
}

// serve serves backend on a new socket until the test ends (or stop).
func serve(t testing.TB, backend ipam.Store, o agentsock.Options) *served {
	t.Helper()
	return serveAt(t, socketPath(t), backend, o)
}

func serveAt(t testing.TB, path string, backend ipam.Store, o agentsock.Options) *served {
	t.Helper()
	l, err := agentsock.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: l, n: new(atomic.Int64)}
	ctx, cancel := context.WithCancel(context.Background())
	srv := agentsock.NewServer(backend, o)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, cl) }()
	var stopped atomic.Bool
	stop := func() {
		if stopped.Swap(true) {
			return
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
	t.Cleanup(stop)
	return &served{srv: srv, path: path, accepts: cl.n, stop: stop}
}

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

func client(t testing.TB, path string) *agentsock.Client {
	t.Helper()
	c, err := agentsock.Open(path, agentsock.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestSuite: the store suite through the socket to bbolt, with the cache
// and without (the watch half is skipped: the client is no
// ipam.Watcher); and RunWrites on any keys and on the allocator's.
func TestSuite(t *testing.T) {
	for _, entries := range []int{0, -1} {
		t.Run(fmt.Sprintf("Run/cache%d", entries), func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) ipam.Store {
				return client(t, serve(t, boltStore(t), agentsock.Options{CacheEntries: entries}).path)
			})
		})
	}
	for _, cache := range []struct {
		name    string
		entries int
	}{{"cache", 0}, {"nocache", -1}, {"tinycache", 2}} {
		for name, shape := range map[string]storetest.Shape{"raw": storetest.RawShape(), "ipam": storetest.IPAMShape()} {
			t.Run(cache.name+"/"+name, func(t *testing.T) {
				storetest.RunWrites(t, func(t *testing.T, _ string) ipam.Store {
					return client(t, serve(t, boltStore(t), agentsock.Options{CacheEntries: cache.entries}).path)
				}, shape)
			})
		}
	}
}

// TestAllocatorSuite: the allocator's suite through the socket, the
// server's cache included, to bbolt: the cache changes no allocator
// semantics.
func TestAllocatorSuite(t *testing.T) {
	ipamtest.Run(t, func(t *testing.T) ipam.Store {
		return client(t, serve(t, boltStore(t), agentsock.Options{}).path)
	}, ipamtest.Options{})
}

// TestKeptConnection: one client's sequential calls share one
// connection, and a client per exec opens one.
func TestKeptConnection(t *testing.T) {
	s := serve(t, boltStore(t), agentsock.Options{})
	ctx := t.Context()
	for range 3 {
		c := client(t, s.path)
		rev, err := c.Write(ctx, ipam.Write{Key: "/k", ModRevision: ipam.AnyRevision, Value: []byte("v")})
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if kv, err := c.Get(ctx, "/k"); err != nil || kv.ModRevision != rev {
				t.Fatalf("Get = %+v, %v; want revision %d", kv, err, rev)
			}
		}
		if _, err := c.List(ctx, "/"); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	if n := s.accepts.Load(); n != 3 {
		t.Fatalf("3 clients of 5 calls each opened %d connections, want 3", n)
	}
}

// TestSocketMode: the socket is 0600, a stale file at its path is
// replaced, and Close removes it.
func TestSocketMode(t *testing.T) {
	path := socketPath(t)
	if err := os.WriteFile(path, []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := agentsock.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %s: mode %v, want a socket, 0600", path, fi.Mode())
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Fatalf("directory holds %d files after Listen, want the socket alone", len(ents))
	}
	l.Close()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("after Close: %v, want the socket gone", err)
	}
}

// TestSocketReplacedNotRemoved: a server that closes after another took
// its path over leaves the new socket.
func TestSocketReplacedNotRemoved(t *testing.T) {
	path := socketPath(t)
	old, err := agentsock.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := agentsock.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Close()
	old.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the newer server's socket: %v", err)
	}
}

// TestUnavailable: no socket, a socket nobody serves, and a server gone
// while the client kept its connection are all ErrUnavailable, naming
// the socket.
func TestUnavailable(t *testing.T) {
	ctx := t.Context()
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ipam.ErrUnavailable) || !strings.Contains(err.Error(), "agent store ") {
			t.Errorf("%s: err = %v, want ErrUnavailable naming the agent store", what, err)
		}
	}
	absent := client(t, filepath.Join(t.TempDir(), "absent.sock"))
	_, err := absent.Get(ctx, "/k")
	check("absent socket", err)

	s := serve(t, boltStore(t), agentsock.Options{})
	c := client(t, s.path)
	if _, err := c.Write(ctx, ipam.Write{Key: "/k", Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	s.stop()
	_, err = c.Get(ctx, "/k")
	check("Get after the server stopped", err)
	_, err = c.Write(ctx, ipam.Write{Key: "/k", ModRevision: ipam.AnyRevision})
	check("Write after the server stopped", err)
	_, err = client(t, s.path).Get(ctx, "/k")
	check("new client after the server stopped", err)
}

// TestServerRestart: a read on a connection kept from before the agent
// restarted is sent again on a new one; a write is not resent.
func TestServerRestart(t *testing.T) {
	ctx := t.Context()
	backend := boltStore(t)
	s := serve(t, backend, agentsock.Options{})
	c := client(t, s.path)
	rev, err := c.Write(ctx, ipam.Write{Key: "/k", Value: []byte("v")})
	if err != nil {
		t.Fatal(err)
	}
	s.stop()
	s = serveAt(t, s.path, backend, agentsock.Options{})
	if kv, err := c.Get(ctx, "/k"); err != nil || kv.ModRevision != rev {
		t.Fatalf("Get after restart = %+v, %v", kv, err)
	}
	s.stop()
	serveAt(t, s.path, backend, agentsock.Options{})
	if _, err := c.Write(ctx, ipam.Write{Key: "/k", ModRevision: rev, Value: []byte("w")}); !errors.Is(err, ipam.ErrUnavailable) {
		t.Fatalf("Write on a connection the restart closed: %v, want ErrUnavailable", err)
	}
	if kv, err := backend.Get(ctx, "/k"); err != nil || string(kv.Value) != "v" {
		t.Fatalf("the refused write reached the store: %+v, %v", kv, err)
	}
}

// TestDeadline: the client gives up at its deadline with
// ErrUnavailable, and the server's call to its backend carries the same
// deadline.
func TestDeadline(t *testing.T) {
	b := &blockingStore{Store: boltStore(t), seen: make(chan time.Time, 1)}
	c := client(t, serve(t, b, agentsock.Options{}).path)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	want, _ := ctx.Deadline()
	start := time.Now()
	_, err := c.Get(ctx, "/k")
	if !errors.Is(err, ipam.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("Get past its deadline: %v, want ErrUnavailable (deadline exceeded)", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Get returned %s after a 200ms deadline", d)
	}
	if got := <-b.seen; !got.Equal(want) {
		t.Fatalf("backend's deadline %v, want the client's %v", got, want)
	}
	// Canceled without a deadline: the wait ends too.
	ctx, cancel = context.WithCancel(t.Context())
	time.AfterFunc(100*time.Millisecond, cancel)
	if _, err := c.Get(ctx, "/k"); !errors.Is(err, ipam.ErrUnavailable) {
		t.Fatalf("Get canceled: %v, want ErrUnavailable", err)
	}
}

// blockingStore's Get waits for its context to end, after reporting the
// deadline it was given.
type blockingStore struct {
	ipam.Store
	seen chan time.Time
}

func (b *blockingStore) Get(ctx context.Context, key string) (ipam.KV, error) {
	dl, _ := ctx.Deadline()
	select {
	case b.seen <- dl:
	default:
	}
	<-ctx.Done()
	return ipam.KV{}, ctx.Err()
}
