package kvstore

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podnet/podnet/agent/clusterstate"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/bolt"
)

// breakableStore ends every open watch with ErrCompacted on demand, as
// etcd does when a watcher falls behind a compaction.
type breakableStore struct {
	*bolt.Store
	mu     sync.Mutex
	breaks []chan struct{}
}

func (s *breakableStore) Watch(ctx context.Context, prefix string, fromRev int64) (<-chan ipam.WatchResponse, error) {
	in, err := s.Store.Watch(ctx, prefix, fromRev)
	if err != nil {
		return nil, err
	}
	brk := make(chan struct{})
	s.mu.Lock()
	s.breaks = append(s.breaks, brk)
	s.mu.Unlock()
	out := make(chan ipam.WatchResponse)
	go func() {
		defer close(out)
		for {
			select {
			case r, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- r:
				case <-ctx.Done():
					return
				}
			case <-brk:
				select {
				case out <- ipam.WatchResponse{Err: ipam.ErrCompacted}:
				case <-ctx.Done():
				}
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func (s *breakableStore) breakAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.breaks {
		close(b)
	}
	s.breaks = nil
}

func TestWatcherResyncsAfterCompaction(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bs, err := bolt.Open(ctx, bolt.Options{Path: filepath.Join(t.TempDir(), "ipam.db"), HoldOpen: true, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	s := &breakableStore{Store: bs}
	keys := ipam.Keys{}
	var (
		mu       sync.Mutex
		state    *clusterstate.State
		restarts atomic.Int32
		synced   atomic.Bool
	)
	w := &watcher{
		store:    s,
		prefixes: []string{clusterstate.NodesPrefix(ipam.DefaultPrefix), keys.Nodes()},
		newState: func() *clusterstate.State { return clusterstate.NewState(ipam.DefaultPrefix) },
		replace: func(st *clusterstate.State, _ int64) {
			mu.Lock()
			state = st
			mu.Unlock()
		},
		apply: func(key string, value []byte, deleted bool, _ int64) bool {
			mu.Lock()
			defer mu.Unlock()
			changed, _ := state.Apply(key, value, deleted)
			return changed
		},
		synced:     synced.Store,
		restarts:   func() { restarts.Add(1) },
		logf:       func(string, ...any) {},
		minBackoff: time.Millisecond, maxBackoff: 10 * time.Millisecond,
	}
	go w.run(ctx)
	put := func(name, addr string) {
		b := []byte(`{"name":"` + name + `","address":"` + addr + `"}`)
		if _, err := s.Write(ctx, ipam.Write{Key: clusterstate.NodeKey(ipam.DefaultPrefix, name), ModRevision: ipam.AnyRevision, Value: b}); err != nil {
			t.Fatal(err)
		}
	}
	nodes := func() int {
		mu.Lock()
		defer mu.Unlock()
		if state == nil {
			return -1
		}
		return len(state.Snapshot().Nodes)
	}
	put("a", "198.18.0.1")
	testutil.WaitFor(t, "node a seen", 5*time.Second, func() (bool, error) { return nodes() == 1, nil })
	put("b", "198.18.0.2")
	testutil.WaitFor(t, "node b seen through the watch", 5*time.Second, func() (bool, error) { return nodes() == 2, nil })
	s.breakAll()
	testutil.WaitFor(t, "restart counted", 5*time.Second, func() (bool, error) { return restarts.Load() == 1, nil })
	// A change while no watch runs is found by the relist.
	put("c", "198.18.0.3")
	testutil.WaitFor(t, "node c seen after the resync", 5*time.Second, func() (bool, error) { return nodes() == 3 && synced.Load(), nil })
}
