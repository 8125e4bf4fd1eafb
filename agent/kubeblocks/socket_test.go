package kubeblocks

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/agentsock"
	"github.com/podnet/podnet/ipam/store/bolt"
)

func newService(t *testing.T, socket string) (*Service, *prometheus.Registry) {
	t.Helper()
	store, err := bolt.Open(context.Background(), bolt.Options{Path: filepath.Join(t.TempDir(), "ipam.db"), HoldOpen: true, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	reg := prometheus.NewRegistry()
	return New(Config{Store: store, Pools: []ipam.Pool{{Name: "default", CIDR: netip.MustParsePrefix("10.244.0.0/16")}}, Socket: socket,
		Registry: reg, Logger: slog.New(slog.DiscardHandler)}), reg
}

// run runs s until stop, which returns what Run did (and may be called
// again).
func run(s *Service) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	return sync.OnceValue(func() error { cancel(); return <-done })
}

// TestSocketListenRetried: a socket that cannot be made at first (its
// directory's path is taken by a file) is retried until it can; the
// service is not ready meanwhile, and says why.
func TestSocketListenRetried(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "run")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s, reg := newService(t, filepath.Join(blocker, "ipam.sock"))
	stop := run(s)
	defer stop()
	waitFor(t, "not listening reported", func() bool {
		err := s.Ready()
		return err != nil && strings.Contains(err.Error(), "not listening")
	})
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.ReadyC():
	case <-time.After(10 * time.Second):
		t.Fatalf("socket not served 10s after its path was freed: %v", s.Ready())
	}
	c, err := agentsock.Open(filepath.Join(blocker, "ipam.sock"), agentsock.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if kvs, err := c.List(context.Background(), ipam.Keys{}.Pools()); err != nil || len(kvs) != 1 {
		t.Fatalf("the seeded pools through the socket: %v, %v", kvs, err)
	}
	if got := testutil.ToFloat64(socketCounter(t, reg, "podnet_agent_ipam_socket_requests_total", "list")); got < 1 {
		t.Errorf("socket list requests counted %v, want at least 1", got)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run after ctx ended: %v", err)
	}
}

// TestSocketListenGivesUp: a socket that cannot be made for listenGiveUp
// ends Run with the error, so that the agent exits and is restarted.
func TestSocketListenGivesUp(t *testing.T) {
	defer func(d time.Duration) { listenGiveUp = d }(listenGiveUp)
	listenGiveUp = 300 * time.Millisecond
	blocker := filepath.Join(t.TempDir(), "run")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s, _ := newService(t, filepath.Join(blocker, "ipam.sock"))
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), blocker) {
			t.Fatalf("Run = %v, want an error naming the socket", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run still retrying 20s after a permanent listen failure")
	}
}

// failingListener fails its first Accept, as a listener broken under
// the server would.
type failingListener struct {
	net.Listener
	failed atomic.Bool
}

func (l *failingListener) Accept() (net.Conn, error) {
	if !l.failed.Swap(true) {
		return nil, errors.New("accept: broken on purpose")
	}
	return l.Listener.Accept()
}

// TestSocketServedAgainAfterFailures: a socket that stops serving is made
// again, even when the first attempts to make it fail: the node's plugins
// have no other way to the IPAM.
func TestSocketServedAgainAfterFailures(t *testing.T) {
	defer func(f func(string) (net.Listener, error)) { listenSocket = f }(listenSocket)
	var calls atomic.Int32
	listenSocket = func(path string) (net.Listener, error) {
		switch calls.Add(1) {
		case 1:
			l, err := agentsock.Listen(path)
			if err != nil {
				return nil, err
			}
			return &failingListener{Listener: l}, nil
		case 2, 3:
			return nil, errors.New("listen: failing on purpose")
		}
		return agentsock.Listen(path)
	}
	path := filepath.Join(t.TempDir(), "ipam.sock")
	s, _ := newService(t, path)
	stop := run(s)
	defer stop()
	waitFor(t, "socket made a fourth time and served", func() bool { return calls.Load() >= 4 && s.Ready() == nil })
	c, err := agentsock.Open(path, agentsock.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.List(context.Background(), ipam.Keys{}.Pools()); err != nil {
		t.Fatalf("List through the socket made again: %v", err)
	}
}

func socketCounter(t *testing.T, reg *prometheus.Registry, name, op string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "op" && l.GetValue() == op {
					return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "x", Help: "x"}, func() float64 { return m.GetCounter().GetValue() })
				}
			}
		}
	}
	t.Fatalf("no %s{op=%q}", name, op)
	return nil
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 10s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
