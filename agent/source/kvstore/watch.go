package kvstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/podnet/podnet/agent/clusterstate"
	"github.com/podnet/podnet/ipam"
)

// watcher keeps a clusterstate.State current: it lists every watched prefix,
// replaces the state with what it read, and then follows one watch per
// prefix from the revision after its list. When any watch breaks (the
// store compacted the revision it needs, the connection failed, the
// channel closed), it lists again and resyncs from scratch: events lost
// while the watch was down are never needed.
type watcher struct {
	store    ipam.Watcher
	prefixes []string
	// replace installs a freshly listed state; apply changes the current
	// one. Both return whether routing may have changed. They run on the
	// watcher's goroutine only.
	// rev is the revision the list read, or the event's revision.
	replace  func(s *clusterstate.State, rev int64)
	apply    func(key string, value []byte, deleted bool, rev int64) bool
	newState func() *clusterstate.State
	// synced is called after each successful list (true) and when a
	// watch breaks (false).
	synced   func(bool)
	restarts func()
	logf     func(msg string, args ...any)
	// backoff bounds the wait between failed sessions.
	minBackoff, maxBackoff time.Duration
}

// run follows the store until ctx ends.
func (w *watcher) run(ctx context.Context) {
	backoff := w.minBackoff
	for first := true; ; first = false {
		if !first {
			w.restarts()
		}
		start := time.Now()
		err := w.session(ctx)
		if ctx.Err() != nil {
			return
		}
		w.synced(false)
		if time.Since(start) > 10*time.Second {
			backoff = w.minBackoff // it had been working: retry at once
		}
		w.logf("store watch broke; listing again", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, w.maxBackoff)
	}
}

type taggedResponse struct {
	prefix string
	resp   ipam.WatchResponse
	closed bool
}

// session is one list and the watches that follow it; it returns when a
// watch breaks or ctx ends.
func (w *watcher) session(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fresh := w.newState()
	revs := make([]int64, len(w.prefixes))
	for i, p := range w.prefixes {
		kvs, rev, err := w.store.ListRev(ctx, p)
		if err != nil {
			return fmt.Errorf("list %s: %w", p, err)
		}
		for _, kv := range kvs {
			if _, err := fresh.Apply(kv.Key, kv.Value, false); err != nil {
				w.logf("ignoring undecodable value", "key", kv.Key, "err", err)
			}
		}
		revs[i] = rev
	}
	merged := make(chan taggedResponse)
	for i, p := range w.prefixes {
		ch, err := w.store.Watch(ctx, p, revs[i]+1)
		if err != nil {
			return fmt.Errorf("watch %s: %w", p, err)
		}
		go func() {
			for r := range ch {
				select {
				case merged <- taggedResponse{prefix: p, resp: r}:
				case <-ctx.Done():
					return
				}
			}
			select {
			case merged <- taggedResponse{prefix: p, closed: true}:
			case <-ctx.Done():
			}
		}()
	}
	w.replace(fresh, slices.Min(revs))
	w.synced(true)
	for {
		var tr taggedResponse
		select {
		case <-ctx.Done():
			return ctx.Err()
		case tr = <-merged:
		}
		if tr.closed {
			return fmt.Errorf("watch %s: channel closed", tr.prefix)
		}
		for _, ev := range tr.resp.Events {
			w.apply(ev.KV.Key, ev.KV.Value, ev.Type == ipam.EventDelete, ev.KV.ModRevision)
		}
		if err := tr.resp.Err; err != nil {
			// ErrCompacted included: the relist is the resync.
			return fmt.Errorf("watch %s: %w", tr.prefix, err)
		}
	}
}
