package bolt

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/podnet/podnet/ipam"
)

// Watch implements ipam.Watcher by reading the change log after every local
// commit and every PollInterval (for other processes' commits).
func (s *Store) Watch(ctx context.Context, prefix string, fromRev int64) (<-chan ipam.WatchResponse, error) {
	next := fromRev
	if next <= 0 {
		_, rev, err := s.ListRev(ctx, "\x00none")
		if err != nil {
			return nil, err
		}
		next = rev + 1
	}
	ch := make(chan ipam.WatchResponse, 16)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(ch)
		tick := time.NewTicker(s.opts.PollInterval)
		defer tick.Stop()
		for {
			changed := s.changedCh() // before reading, so no commit is missed
			evs, n, err := s.readLog(ctx, prefix, next)
			if err != nil {
				select {
				case ch <- ipam.WatchResponse{Err: err}:
				case <-ctx.Done():
				case <-s.done:
				}
				return
			}
			next = n
			if len(evs) > 0 {
				select {
				case ch <- ipam.WatchResponse{Events: evs}:
				case <-ctx.Done():
					return
				case <-s.done:
					return
				}
				continue
			}
			select {
			case <-changed:
			case <-tick.C:
			case <-ctx.Done():
				return
			case <-s.done:
				return
			}
		}
	}()
	return ch, nil
}

// readLog returns the events under prefix from revision from on, and the
// revision to read from next time.
func (s *Store) readLog(ctx context.Context, prefix string, from int64) ([]ipam.Event, int64, error) {
	var evs []ipam.Event
	next := from
	err := s.withDB(ctx, func(db *bolt.DB) error {
		return db.View(func(tx *bolt.Tx) error {
			meta := tx.Bucket(metaBucket)
			if c := getInt(meta, compactKey); from <= c {
				return fmt.Errorf("watch from revision %d, log starts after %d: %w", from, c, ipam.ErrCompacted)
			}
			cur := getInt(meta, revKey)
			c := tx.Bucket(logBucket).Cursor()
			for k, v := c.Seek(binary.BigEndian.AppendUint64(nil, uint64(from))); k != nil; k, v = c.Next() {
				rev, t, key, value := decodeLog(k, v)
				if !strings.HasPrefix(key, prefix) {
					continue
				}
				evs = append(evs, ipam.Event{Type: t, KV: ipam.KV{Key: key, Value: value, ModRevision: rev}})
			}
			next = max(from, cur+1)
			return nil
		})
	})
	return evs, next, err
}
