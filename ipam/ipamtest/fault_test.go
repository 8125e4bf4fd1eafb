package ipamtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/bolt"
)

// stuckStore answers like the bolt store it wraps until stuck is set;
// from then on every call waits for its context to end, as calls to a
// cluster that has lost every member do.
type stuckStore struct {
	*bolt.Store
	stuck *atomic.Bool
}

func (s stuckStore) wait(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

func (s stuckStore) Get(ctx context.Context, key string) (ipam.KV, error) {
	if s.stuck.Load() {
		return ipam.KV{}, s.wait(ctx)
	}
	return s.Store.Get(ctx, key)
}

func (s stuckStore) List(ctx context.Context, prefix string) ([]ipam.KV, error) {
	if s.stuck.Load() {
		return nil, s.wait(ctx)
	}
	return s.Store.List(ctx, prefix)
}

func (s stuckStore) Write(ctx context.Context, w ipam.Write) (int64, error) {
	if s.stuck.Load() {
		return 0, s.wait(ctx)
	}
	return s.Store.Write(ctx, w)
}

// stuckCluster has a leader until asked for it: RunQuorumFaults asks
// right after it has written its pool, so every allocation then finds the
// store stuck.
type stuckCluster struct{ stuck *atomic.Bool }

func (c stuckCluster) Stop(int)          {}
func (c stuckCluster) Restart(int)       {}
func (c stuckCluster) Running(int) bool  { return true }
func (c stuckCluster) Leader() (idx int) { c.stuck.Store(true); return 0 }

const stuckChildEnv = "PODNET_IPAMTEST_STUCK_CHILD"

// TestQuorumFaultsStuckStoreFails: when no allocation of the first phase
// succeeds, so the leader is never stopped, RunQuorumFaults fails the
// test with a message saying so within its phase deadline, instead of
// waiting for the go test timeout. The run under test is a child process,
// since it must fail.
func TestQuorumFaultsStuckStoreFails(t *testing.T) {
	if os.Getenv(stuckChildEnv) == "1" {
		stuck := new(atomic.Bool)
		runQuorumFaults(t, stuckCluster{stuck}, func(t *testing.T) ipam.Store {
			s, err := bolt.Open(context.Background(), bolt.Options{Path: filepath.Join(t.TempDir(), "ipam.db"), NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return stuckStore{s, stuck}
		}, faultLimits{phase1: 2 * time.Second, alloc: 20 * time.Second})
		return
	}
	if testing.Short() {
		t.Skip("runs a child test process")
	}
	// Without a phase deadline the child would wait for its own -test.timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestQuorumFaultsStuckStoreFails$", "-test.count=1", "-test.v", "-test.timeout=60s")
	cmd.Env = append(os.Environ(), stuckChildEnv+"=1")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if err == nil {
		t.Fatalf("the run with a stuck store passed:\n%s", out)
	}
	if !strings.Contains(string(out), "the leader was never stopped") || strings.Contains(string(out), "test timed out") {
		t.Fatalf("the run with a stuck store did not fail with the phase-1 message (%v, after %v):\n%s", err, took, out)
	}
	if took > 30*time.Second {
		t.Errorf("the run with a stuck store failed after %v; the phase deadline is 2s", took)
	}
}
