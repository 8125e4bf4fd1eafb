package bolt

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/ipamtest"
	"github.com/podnet/podnet/ipam/store/storetest"
)

func newStore(t *testing.T, opts Options) *Store {
	t.Helper()
	if opts.Path == "" {
		opts.Path = filepath.Join(t.TempDir(), "ipam.db")
	}
	s, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStorePerOperation(t *testing.T) {
	storetest.Run(t, func(t *testing.T) ipam.Store { return newStore(t, Options{NoSync: true}) })
}

func TestStoreHoldOpen(t *testing.T) {
	storetest.Run(t, func(t *testing.T) ipam.Store { return newStore(t, Options{HoldOpen: true, NoSync: true}) })
}

// Two per-operation stores on one file stand in for two plugin processes:
// each Open takes its own flock, exactly as another process would.
func TestTwoProcessesShareFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ipam.db")
	a := newStore(t, Options{Path: path, NoSync: true, PollInterval: 10 * time.Millisecond})
	b := newStore(t, Options{Path: path, NoSync: true})
	ctx := context.Background()
	ch, err := a.Watch(ctx, "/k", 0)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := b.Write(ctx, ipam.Write{Key: "/k", Value: []byte("v")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write(ctx, ipam.Write{Key: "/k", Value: []byte("w")}); !errors.Is(err, ipam.ErrConflict) {
		t.Fatalf("a overwrote b's key: %v", err)
	}
	select {
	case r := <-ch:
		if r.Err != nil || len(r.Events) != 1 || r.Events[0].KV.ModRevision != rev {
			t.Fatalf("watch saw %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not see the other store's write")
	}
}

func TestLockTimeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ipam.db")
	newStore(t, Options{Path: path, HoldOpen: true, NoSync: true})
	s := newStore(t, Options{Path: path + ".other", NoSync: true})
	s.opts.Path, s.opts.LockTimeout = path, 50*time.Millisecond
	if _, err := s.Get(context.Background(), "/k"); !errors.Is(err, ipam.ErrUnavailable) {
		t.Fatalf("Get while another holds the file: err = %v, want ErrUnavailable", err)
	}
}

func TestWatchCompacted(t *testing.T) {
	s := newStore(t, Options{HoldOpen: true, NoSync: true, LogRetain: 3})
	ctx := context.Background()
	for i := range 10 {
		if _, err := s.Write(ctx, ipam.Write{Key: "/k", ModRevision: ipam.AnyRevision, Value: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	ch, err := s.Watch(ctx, "/", 2)
	if err != nil {
		t.Fatal(err)
	}
	if r := <-ch; !errors.Is(r.Err, ipam.ErrCompacted) {
		t.Fatalf("watch from a trimmed revision: %+v, want ErrCompacted", r)
	}
	ch, _ = s.Watch(ctx, "/", 8)
	if r := <-ch; r.Err != nil || len(r.Events) != 3 {
		t.Fatalf("watch from retained revision 8: %+v, want 3 events", r)
	}
}

func TestAllocatorSuite(t *testing.T) {
	t.Run("PerOperation", func(t *testing.T) {
		ipamtest.Run(t, func(t *testing.T) ipam.Store { return newStore(t, Options{NoSync: true}) }, ipamtest.Options{})
	})
	t.Run("HoldOpen", func(t *testing.T) {
		ipamtest.Run(t, func(t *testing.T) ipam.Store { return newStore(t, Options{HoldOpen: true, NoSync: true}) }, ipamtest.Options{})
	})
}

// The store contracts hold with early acknowledgement: reads wait for
// pending commits, so every read sees the writes acknowledged before it.
func TestStoreAckApplied(t *testing.T) {
	opts := Options{HoldOpen: true, AckApplied: true, NoSync: true}
	storetest.Run(t, func(t *testing.T) ipam.Store { return newStore(t, opts) })
	ipamtest.Run(t, func(t *testing.T) ipam.Store { return newStore(t, opts) }, ipamtest.Options{})
}

func TestAckAppliedNeedsHoldOpen(t *testing.T) {
	_, err := Open(context.Background(), Options{Path: filepath.Join(t.TempDir(), "db"), AckApplied: true})
	if err == nil {
		t.Fatal("AckApplied without HoldOpen was accepted")
	}
}

// An acknowledged write is on disk after Sync: another store on the file
// sees it once this one lets go.
func TestAckAppliedSyncIsDurable(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ipam.db")
	s, err := Open(ctx, Options{Path: path, HoldOpen: true, AckApplied: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, ipam.Write{Key: "k", ModRevision: ipam.AnyRevision, Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	other := newStore(t, Options{Path: path})
	if kv, err := other.Get(ctx, "k"); err != nil || string(kv.Value) != "v" {
		t.Fatalf("after Sync and Close: %v %v", kv, err)
	}
}

// A commit that fails after its Write was acknowledged: Sync, every later
// call and Close report it, and nothing of it reached the file.
func TestAckAppliedCommitFailure(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ipam.db")
	s, err := Open(ctx, Options{Path: path, HoldOpen: true, AckApplied: true, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	diskFull := errors.New("no space left on device")
	failAfterAck = func() error { return diskFull }
	defer func() { failAfterAck = nil }()
	if _, err := s.Write(ctx, ipam.Write{Key: "k", ModRevision: ipam.AnyRevision, Value: []byte("v")}); err != nil {
		t.Fatalf("Write is acknowledged before its commit: %v", err)
	}
	if err := s.Sync(ctx); !errors.Is(err, diskFull) {
		t.Fatalf("Sync: %v, want the commit's failure", err)
	}
	failAfterAck = nil
	if _, err := s.Get(ctx, "k"); !errors.Is(err, diskFull) {
		t.Errorf("Get after the failure: %v", err)
	}
	if _, err := s.Write(ctx, ipam.Write{Key: "k2", ModRevision: ipam.AnyRevision, Value: []byte("v")}); !errors.Is(err, diskFull) {
		t.Errorf("Write after the failure: %v", err)
	}
	if err := s.Close(); !errors.Is(err, diskFull) {
		t.Errorf("Close: %v", err)
	}
	other := newStore(t, Options{Path: path})
	for _, k := range []string{"k", "k2"} {
		if _, err := other.Get(ctx, k); !errors.Is(err, ipam.ErrNotFound) {
			t.Errorf("%s after the failed commit: %v", k, err)
		}
	}
}

// On a fresh host the store's directory (/var/lib/podnet) does not exist:
// the first open makes it, private, in either mode.
func TestOpenMakesTheDirectory(t *testing.T) {
	for _, hold := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "var", "lib", "podnet")
		s, err := Open(context.Background(), Options{Path: filepath.Join(dir, "ipam.db"), HoldOpen: hold})
		if err != nil {
			t.Fatalf("HoldOpen %v: %v", hold, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(dir)
		if err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("HoldOpen %v: directory %v %v, want 0700", hold, fi.Mode(), err)
		}
	}
}
