package bolt

import (
	"context"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/podnet/podnet/ipam"
)

// txnReq is one write waiting for the commit loop, or a barrier (Sync):
// no ops, done once every request queued before it is committed.
type txnReq struct {
	cmps    []compare
	ops     []op
	barrier bool
	rev     int64
	err     error
	// applied is closed, with AckApplied, once rev and err hold the
	// outcome and before the commit; after that neither field changes.
	applied chan struct{}
	done    chan struct{}
}

// groupTxn queues a write for the commit loop and waits for its outcome.
// A caller whose context ends while queued gets ErrUnavailable, but the
// request may still commit: as with etcd, a timed-out write is unknown,
// and the allocator's compares make a retry safe either way.
func (s *Store) groupTxn(ctx context.Context, cmps []compare, ops []op) (int64, error) {
	// Checked first: select picks at random among ready cases, and a
	// canceled caller must not start a write.
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("bolt store: %w (%w)", ipam.ErrUnavailable, err)
	}
	r := &txnReq{cmps: cmps, ops: ops, done: make(chan struct{})}
	if s.opts.AckApplied {
		r.applied = make(chan struct{})
	}
	if err := s.send(ctx, r); err != nil {
		return 0, err
	}
	select {
	case <-r.applied: // nil without AckApplied
		return r.rev, r.err
	case <-r.done:
		return r.rev, r.err
	case <-ctx.Done():
		return 0, fmt.Errorf("bolt store: outcome unknown: %w (%w)", ipam.ErrUnavailable, ctx.Err())
	}
}

// Sync waits until every write acknowledged so far is committed and synced,
// and returns the commit's failure if one failed. Without AckApplied a
// write is durable when it returns, and Sync only waits for other callers'
// queued requests.
func (s *Store) Sync(ctx context.Context) error {
	if s.reqs == nil {
		return s.checkOpen(ctx)
	}
	if err := s.failed(); err != nil {
		return err
	}
	r := &txnReq{barrier: true, done: make(chan struct{})}
	if err := s.send(ctx, r); err != nil {
		return errors.Join(s.failed(), err)
	}
	select {
	case <-r.done:
		return s.failed()
	case <-ctx.Done():
		return fmt.Errorf("bolt store: %w (%w)", ipam.ErrUnavailable, ctx.Err())
	}
}

// syncBeforeRead makes a read see this process's acknowledged writes.
// Only a commit still under way is waited for: an allocation reads the
// store several times before its one write, and those reads pass
// straight through.
func (s *Store) syncBeforeRead(ctx context.Context) error {
	if !s.opts.AckApplied {
		return nil
	}
	if s.unsynced.Load() == 0 {
		return s.failed()
	}
	return s.Sync(ctx)
}

// failed is the commit failure that poisons the store, if any.
func (s *Store) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.commitErr
}

// send queues r for the commit loop.
func (s *Store) send(ctx context.Context, r *txnReq) error {
	s.sendMu.RLock()
	if s.reqsClosed {
		s.sendMu.RUnlock()
		return fmt.Errorf("bolt store %s: closed: %w", s.opts.Path, ipam.ErrUnavailable)
	}
	select {
	case s.reqs <- r:
		s.sendMu.RUnlock()
		return nil
	case <-ctx.Done():
		s.sendMu.RUnlock()
		return fmt.Errorf("bolt store: %w (%w)", ipam.ErrUnavailable, ctx.Err())
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
		// Barriers are done once the requests queued before them are:
		// the loop is sequential, so after this batch's commit.
		var txns, barriers []*txnReq
		for _, r := range batch {
			if r.barrier {
				barriers = append(barriers, r)
			} else {
				txns = append(txns, r)
			}
		}
		if len(txns) > 0 {
			s.commit(txns)
		}
		for _, r := range barriers {
			close(r.done)
		}
	}
}

// failAfterAck, when set by a test, fails the bbolt transaction after
// its requests were acknowledged: what a commit failing on a full disk
// does.
var failAfterAck func() error

func (s *Store) commit(batch []*txnReq) {
	acked := false
	err := s.db.Update(func(tx *bolt.Tx) error {
		if err := s.failed(); err != nil {
			return err
		}
		for _, r := range batch {
			r.rev, r.err = s.apply(tx, r.cmps, r.ops)
			if r.err != nil && !errors.Is(r.err, ipam.ErrConflict) {
				return r.err
			}
		}
		if s.opts.AckApplied {
			acked = true
			s.unsynced.Add(1) // before any caller can read after its ack
			for _, r := range batch {
				close(r.applied)
			}
			if failAfterAck != nil {
				return failAfterAck()
			}
		}
		return nil
	})
	if acked {
		// The callers have their answers; a failure now is for Sync.
		if err != nil {
			s.mu.Lock()
			s.commitErr = fmt.Errorf("bolt store %s: commit of acknowledged writes: %w: %w", s.opts.Path, ipam.ErrWrite, err)
			s.mu.Unlock()
		}
		s.unsynced.Add(-1)
		for _, r := range batch {
			close(r.done)
		}
		if err == nil {
			s.notify()
		}
		return
	}
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
