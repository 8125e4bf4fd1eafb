package bolt

import (
	"context"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/podnet/podnet/ipam"
)

// txnReq is one Txn waiting for the commit loop.
type txnReq struct {
	cmps []ipam.Compare
	ops  []ipam.Op
	rev  int64
	err  error
	done chan struct{}
}

// groupTxn queues a Txn for the commit loop and waits for its outcome.
// A caller whose context ends while queued gets ErrUnavailable, but the
// request may still commit: as with etcd, a timed-out write is unknown,
// and the allocator's compares make a retry safe either way.
func (s *Store) groupTxn(ctx context.Context, cmps []ipam.Compare, ops []ipam.Op) (int64, error) {
	// Checked first: select picks at random among ready cases, and a
	// canceled caller must not start a write.
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("bolt store: %w (%w)", ipam.ErrUnavailable, err)
	}
	r := &txnReq{cmps: cmps, ops: ops, done: make(chan struct{})}
	s.sendMu.RLock()
	if s.reqsClosed {
		s.sendMu.RUnlock()
		return 0, fmt.Errorf("bolt store %s: closed: %w", s.opts.Path, ipam.ErrUnavailable)
	}
	select {
	case s.reqs <- r:
		s.sendMu.RUnlock()
	case <-ctx.Done():
		s.sendMu.RUnlock()
		return 0, fmt.Errorf("bolt store: %w (%w)", ipam.ErrUnavailable, ctx.Err())
	}
	select {
	case <-r.done:
		return r.rev, r.err
	case <-ctx.Done():
		return 0, fmt.Errorf("bolt store: outcome unknown: %w (%w)", ipam.ErrUnavailable, ctx.Err())
	}
}

// commitLoop commits queued requests, as many per bbolt transaction as
// arrived while the previous one was syncing. No timer: a lone request
// commits at once.
func (s *Store) commitLoop() {
	defer s.wg.Done()
	const maxBatch = 256
	for r := range s.reqs {
		batch := []*txnReq{r}
	drain:
		for len(batch) < maxBatch {
			select {
			case r, ok := <-s.reqs:
				if !ok {
					break drain
				}
				batch = append(batch, r)
			default:
				break drain
			}
		}
		s.commit(batch)
	}
}

func (s *Store) commit(batch []*txnReq) {
	err := s.db.Update(func(tx *bolt.Tx) error {
		for _, r := range batch {
			r.rev, r.err = s.apply(tx, r.cmps, r.ops)
			if r.err != nil && !errors.Is(r.err, ipam.ErrConflict) {
				return r.err
			}
		}
		return nil
	})
	if err != nil && len(batch) > 1 {
		// One request broke the transaction (say, a value too large);
		// commit each alone so that only it fails.
		for _, r := range batch {
			s.commit([]*txnReq{r})
		}
		return
	}
	for _, r := range batch {
		if err != nil {
			r.rev, r.err = 0, err
		}
		close(r.done)
	}
	s.notify()
}
