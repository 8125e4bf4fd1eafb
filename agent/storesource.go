package agent

import (
	"context"

	"github.com/podnet/podnet/ipam"
	"sync"
	"time"
)

// runStore is the store datastore (etcd, or bbolt for one node): the
// registrar keeps the node's record in the store, and the watcher keeps
// the cluster state in step with the store's node records and IPAM node
// indexes (never blocks: an allocation causes no watch event). registered is called once, after the first registration.
func (a *Agent) runStore(ctx context.Context, wg *sync.WaitGroup, registered func()) {
	ownKey := NodeKey(a.cfg.Prefix, a.cfg.Node)
	wg.Go(func() { a.reg.run(ctx, registered) })
	w := &watcher{
		store:    a.cfg.Store.(ipam.Watcher), // checked by New
		prefixes: []string{NodesPrefix(a.cfg.Prefix), a.keys.Nodes()},
		newState: func() *clusterState { return newClusterState(a.keys, a.cfg.Prefix) },
		replace: func(s *clusterState, rev int64) {
			a.mu.Lock()
			a.state = s
			_, own := s.nodes[a.cfg.Node]
			a.mu.Unlock()
			a.haveState.Store(true)
			if !own && a.reg.writtenBefore(rev) {
				a.reg.recordLost()
			}
			a.kick()
		},
		apply: func(key string, value []byte, deleted bool, rev int64) bool {
			a.mu.Lock()
			changed, err := a.state.apply(key, value, deleted)
			a.mu.Unlock()
			if err != nil {
				a.log.Warn("ignoring undecodable value", "key", key, "err", err)
			}
			if deleted && key == ownKey && a.reg.writtenBefore(rev) {
				a.reg.recordLost()
			}
			if changed {
				a.kick()
			}
			return changed
		},
		synced:     func(ok bool) { a.watchSynced.Store(ok) },
		restarts:   a.m.watchRestarts.Inc,
		logf:       a.log.Warn,
		minBackoff: 100 * time.Millisecond, maxBackoff: 5 * time.Second,
	}
	wg.Go(func() { w.run(ctx) })
}
