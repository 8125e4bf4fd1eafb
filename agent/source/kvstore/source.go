package kvstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/podnet/podnet/agent/clusterstate"
	"github.com/podnet/podnet/ipam"
)

// Config configures the store source.
type Config struct {
	Node string
	// Store is the datastore; it must be an ipam.Watcher.
	Store ipam.Store
	// Etcd, when set, is the client under Store: the node record is
	// written under a lease of LeaseTTL that the source keeps alive.
	Etcd     *clientv3.Client
	Prefix   string
	LeaseTTL time.Duration
	View     *clusterstate.View
	// Registered is the agent's: true while the node is registered.
	Registered *atomic.Bool
	// Restarts counts the watch's restarts.
	Restarts prometheus.Counter
	Logger   *slog.Logger
}

// Source is the store datastore (etcd, or bbolt for one node): the
// registrar keeps the node's record in the store, and the watcher keeps
// the cluster view in step with the store's node records and IPAM node
// indexes (never blocks: an allocation causes no watch event).
type Source struct {
	cfg         Config
	watcher     ipam.Watcher
	watchSynced atomic.Bool
}

// New checks that cfg.Store can be watched.
func New(cfg Config) (*Source, error) {
	w, ok := cfg.Store.(ipam.Watcher)
	if !ok {
		return nil, fmt.Errorf("agent: store %T cannot be watched (no ipam.Watcher), so it cannot be the datastore", cfg.Store)
	}
	return &Source{cfg: cfg, watcher: w}, nil
}

// Ready returns nil while the node is registered and the watch synced.
func (s *Source) Ready() error {
	switch {
	case !s.cfg.Registered.Load():
		return errors.New("node not registered in the store")
	case !s.watchSynced.Load():
		return errors.New("store watch not synced")
	}
	return nil
}

// Run registers self (again whenever it changes) and follows the store
// until ctx ends. registered is called once, after the first
// registration. Store failures are retried with backoff: they never end
// Run.
func (s *Source) Run(ctx context.Context, self *clusterstate.Self, registered func()) error {
	cfg := s.cfg
	keys := ipam.Keys{Prefix: cfg.Prefix}
	ownKey := clusterstate.NodeKey(cfg.Prefix, cfg.Node)
	reg := newRegistrar(cfg.Store, cfg.Etcd, cfg.Prefix, self, cfg.LeaseTTL, cfg.Logger, cfg.Registered)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { reg.run(ctx, registered) })
	w := &watcher{
		store:    s.watcher,
		prefixes: []string{clusterstate.NodesPrefix(cfg.Prefix), keys.Nodes()},
		newState: func() *clusterstate.State { return clusterstate.NewState(cfg.Prefix) },
		replace: func(st *clusterstate.State, rev int64) {
			own := st.HasNode(cfg.Node)
			cfg.View.Replace(st)
			if !own && reg.writtenBefore(rev) {
				reg.recordLost()
			}
		},
		apply: func(key string, value []byte, deleted bool, rev int64) bool {
			var changed bool
			cfg.View.Update(func(st *clusterstate.State) bool {
				var err error
				if changed, err = st.Apply(key, value, deleted); err != nil {
					cfg.Logger.Warn("ignoring undecodable value", "key", key, "err", err)
				}
				return changed
			})
			if deleted && key == ownKey && reg.writtenBefore(rev) {
				reg.recordLost()
			}
			return changed
		},
		synced:     s.watchSynced.Store,
		restarts:   cfg.Restarts.Inc,
		logf:       cfg.Logger.Warn,
		minBackoff: 100 * time.Millisecond, maxBackoff: 5 * time.Second,
	}
	wg.Go(func() { w.run(ctx) })
	return nil
}
