package kvstore

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/podnet/podnet/agent/clusterstate"
	"github.com/podnet/podnet/ipam"
)

// registrar keeps this node's record in the store for as long as the
// agent runs. With etcd the record is attached to a lease that the agent
// keeps alive, so a node whose agent dies disappears from every other
// node's routes after the lease's TTL; the lease is not revoked on a clean
// exit, so a restart within the TTL changes nothing for the other nodes.
// With a store without leases (bbolt, one node) the record is a plain put.
// A change of the record (self.Changed: a rotated WireGuard key) is
// written at once, under a new lease as after a lost one.
type registrar struct {
	store ipam.Store
	etcd  *clientv3.Client
	key   string
	self  *clusterstate.Self
	ttl   time.Duration
	log   *slog.Logger

	registered *atomic.Bool // the agent's
	// rev is the store revision of the last write of the record.
	rev atomic.Int64
	// lost is signalled when the record is found missing while
	// registered (removed by hand, or its lease expired during a
	// partition); the registrar writes it again.
	lost chan struct{}
}

func newRegistrar(store ipam.Store, etcd *clientv3.Client, prefix string, self *clusterstate.Self, ttl time.Duration, log *slog.Logger, registered *atomic.Bool) *registrar {
	return &registrar{store: store, etcd: etcd, key: clusterstate.NodeKey(prefix, self.Record().Name), self: self, ttl: ttl, log: log, lost: make(chan struct{}, 1), registered: registered}
}

// writtenBefore reports whether the node is registered by a write at or
// before rev: a list or event at rev that lacks the record means it is
// really gone, not that it was read before it was written.
func (r *registrar) writtenBefore(rev int64) bool {
	return r.registered.Load() && r.rev.Load() != 0 && r.rev.Load() <= rev
}

// recordLost tells the registrar its record is gone.
func (r *registrar) recordLost() {
	select {
	case r.lost <- struct{}{}:
	default:
	}
}

// run registers the node and keeps it registered until ctx ends. first
// is called once, after the first successful registration.
func (r *registrar) run(ctx context.Context, first func()) {
	backoff := 100 * time.Millisecond
	once := false
	for ctx.Err() == nil {
		// Each registration has its own keepalive: the lease of a record
		// written again must stop being renewed, so that it expires.
		kctx, stop := context.WithCancel(ctx)
		keepalive, err := r.register(kctx)
		if err != nil {
			stop()
			r.registered.Store(false)
			r.log.Warn("node registration failed", "key", r.key, "err", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		r.registered.Store(true)
		if !once {
			once = true
			first()
		}
		// Drain stale signals from before this registration.
		select {
		case <-r.lost:
		default:
		}
		r.hold(ctx, keepalive)
		stop()
	}
}

// hold waits until the registration needs renewing: the lease's
// keepalive channel closed (lease lost or expired), the record was seen
// missing, or the record changed.
func (r *registrar) hold(ctx context.Context, keepalive <-chan *clientv3.LeaseKeepAliveResponse) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.lost:
			r.log.Warn("node record disappeared; registering again", "key", r.key)
			return
		case <-r.self.Changed():
			return
		case _, ok := <-keepalive:
			if !ok {
				r.registered.Store(false)
				r.log.Warn("node lease lost; registering again", "key", r.key)
				return
			}
		}
	}
}

// register writes the record, under a new lease when the store is etcd.
func (r *registrar) register(ctx context.Context) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	rec := r.self.Record()
	val, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if r.etcd == nil {
		rev, err := r.store.Write(tctx, ipam.Write{Key: r.key, ModRevision: ipam.AnyRevision, Value: val})
		if err != nil {
			return nil, fmt.Errorf("write %s: %w", r.key, err)
		}
		r.rev.Store(rev)
		return nil, nil // a nil channel: hold waits for ctx or lost
	}
	ttl := int64(math.Ceil(r.ttl.Seconds()))
	lease, err := r.etcd.Grant(tctx, max(ttl, 1))
	if err != nil {
		return nil, fmt.Errorf("grant lease: %w", err)
	}
	put, err := r.etcd.Put(tctx, r.key, string(val), clientv3.WithLease(lease.ID))
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", r.key, err)
	}
	r.rev.Store(put.Header.Revision)
	ch, err := r.etcd.KeepAlive(ctx, lease.ID)
	if err != nil {
		return nil, fmt.Errorf("keep lease %x alive: %w", lease.ID, err)
	}
	r.log.Info("node registered", "key", r.key, "address", rec.Address, "lease", fmt.Sprintf("%x", lease.ID), "ttl", ttl)
	return ch, nil
}
