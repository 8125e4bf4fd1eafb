package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/etcdconf"
)

// Options configure a Store.
type Options struct {
	// Cluster is where the cluster is, as for the gateway store
	// (ipam/store/etcdgw).
	etcdconf.Cluster
	// Logger receives the etcd client's own logs (reconnections,
	// balancer changes); nil discards them.
	Logger *slog.Logger
}

// Store is an ipam.Store over an etcd v3 cluster.
type Store struct {
	c   *clientv3.Client
	own bool // Close closes c
	// seen is the highest store revision a response has shown this
	// Store. A watch "from now" starts after it: the member serving the
	// watch may lag the one that served a write, and would otherwise
	// replay that write as if it came after the watch began.
	seen atomic.Int64
}

// saw records that the store has reached rev.
func (s *Store) saw(rev int64) {
	for {
		cur := s.seen.Load()
		if rev <= cur || s.seen.CompareAndSwap(cur, rev) {
			return
		}
	}
}

var _ ipam.Store = (*Store)(nil)

// New connects to the cluster in opts.
func New(opts Options) (*Store, error) {
	c, err := opts.WithDefaults()
	if err != nil {
		return nil, err
	}
	cfg := clientv3.Config{
		Endpoints:   c.Endpoints,
		DialTimeout: c.DialTimeout,
		Username:    c.Username,
		Password:    c.Password,
		Logger:      zapLogger(opts.Logger),
	}
	if c.TLS() {
		if cfg.TLS, err = c.TLSConfig(); err != nil {
			return nil, err
		}
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd store %v: %w", c.Endpoints, err)
	}
	return &Store{c: cli, own: true}, nil
}

// NewFromClient wraps an existing client; Close leaves it open.
func NewFromClient(c *clientv3.Client) *Store { return &Store{c: c} }

// Get implements ipam.Store.
func (s *Store) Get(ctx context.Context, key string) (ipam.KV, error) {
	resp, err := s.c.Get(ctx, key)
	if err != nil {
		return ipam.KV{}, wrap("get "+key, ctx, err)
	}
	s.saw(resp.Header.Revision)
	if len(resp.Kvs) == 0 {
		return ipam.KV{}, fmt.Errorf("%s: %w", key, ipam.ErrNotFound)
	}
	kv := resp.Kvs[0]
	return ipam.KV{Key: key, Value: kv.Value, ModRevision: kv.ModRevision}, nil
}

// List implements ipam.Store.
func (s *Store) List(ctx context.Context, prefix string) ([]ipam.KV, error) {
	kvs, _, err := s.ListRev(ctx, prefix)
	return kvs, err
}

// ListRev implements ipam.Watcher.
func (s *Store) ListRev(ctx context.Context, prefix string) ([]ipam.KV, int64, error) {
	resp, err := s.c.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, wrap("list "+prefix, ctx, err)
	}
	s.saw(resp.Header.Revision)
	out := make([]ipam.KV, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		out[i] = ipam.KV{Key: string(kv.Key), Value: kv.Value, ModRevision: kv.ModRevision}
	}
	return out, resp.Header.Revision, nil
}

// Write implements ipam.Store: one etcd txn comparing the key's
// ModRevision (0 holds exactly when the key does not exist), none for
// AnyRevision.
func (s *Store) Write(ctx context.Context, w ipam.Write) (int64, error) {
	op := clientv3.OpPut(w.Key, string(w.Value))
	if w.Delete {
		op = clientv3.OpDelete(w.Key)
	}
	txn := s.c.Txn(ctx)
	if w.ModRevision != ipam.AnyRevision {
		txn = txn.If(clientv3.Compare(clientv3.ModRevision(w.Key), "=", w.ModRevision))
	}
	resp, err := txn.Then(op).Commit()
	if err != nil {
		return 0, wrap("write "+w.Key, ctx, err)
	}
	s.saw(resp.Header.Revision)
	if !resp.Succeeded {
		return 0, fmt.Errorf("etcd write %s at revision %d: %w", w.Key, w.ModRevision, ipam.ErrConflict)
	}
	if w.Delete {
		return 0, nil
	}
	return resp.Header.Revision, nil
}

// Watch implements ipam.Watcher.
func (s *Store) Watch(ctx context.Context, prefix string, fromRev int64) (<-chan ipam.WatchResponse, error) {
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if fromRev <= 0 {
		if seen := s.seen.Load(); seen > 0 {
			fromRev = seen + 1
		}
	}
	if fromRev > 0 {
		opts = append(opts, clientv3.WithRev(fromRev))
	}
	// Without a leader a member's watch would stall silently; with this
	// option it ends and the caller re-lists.
	wch := s.c.Watch(clientv3.WithRequireLeader(ctx), prefix, opts...)
	out := make(chan ipam.WatchResponse, 16)
	go func() {
		defer close(out)
		for resp := range wch {
			var r ipam.WatchResponse
			switch {
			case resp.CompactRevision != 0:
				r.Err = fmt.Errorf("watch %s from %d: compacted at %d: %w", prefix, fromRev, resp.CompactRevision, ipam.ErrCompacted)
			case resp.Err() != nil:
				r.Err = wrap("watch "+prefix, ctx, resp.Err())
			}
			for _, ev := range resp.Events {
				e := ipam.Event{KV: ipam.KV{Key: string(ev.Kv.Key), Value: ev.Kv.Value, ModRevision: ev.Kv.ModRevision}}
				if ev.Type == clientv3.EventTypeDelete {
					e.Type = ipam.EventDelete
				}
				r.Events = append(r.Events, e)
			}
			if len(r.Events) == 0 && r.Err == nil {
				continue // progress notifications
			}
			select {
			case out <- r:
			case <-ctx.Done():
				return
			}
			if r.Err != nil {
				return
			}
		}
	}()
	return out, nil
}

// Close implements ipam.Store.
func (s *Store) Close() error {
	if s.own {
		return s.c.Close()
	}
	return nil
}

// wrap marks transient failures ErrUnavailable, so the allocator answers
// CNI code 11 rather than an internal error.
func wrap(what string, ctx context.Context, err error) error {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("etcd %s: %w (%w)", what, ipam.ErrUnavailable, err)
	}
	code := status.Code(err)
	// The client turns the server's errors ("request timed out", "leader
	// changed", "no leader") into rpctypes.EtcdError, which keeps the
	// gRPC code but not the status that status.Code reads.
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		code = ee.Code()
	}
	switch code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.ResourceExhausted:
		return fmt.Errorf("etcd %s: %w (%w)", what, ipam.ErrUnavailable, err)
	}
	return fmt.Errorf("etcd %s: %w", what, err)
}
