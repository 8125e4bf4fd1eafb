package bolt

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/podnet/podnet/ipam"
)

// Options configure a Store.
type Options struct {
	// Path of the database file; the lock file is Path + ".lock".
	Path string
	// HoldOpen keeps the database open and locked until Close: for a
	// process that is the file's sole user, or that holds it for one
	// short operation (a plugin's ADD); see the package doc.
	HoldOpen bool
	// LockTimeout bounds waiting for the file lock (default 10s); the
	// caller's context may end the wait sooner.
	LockTimeout time.Duration
	// LogRetain is how many revisions of change log Watch can replay
	// (default 10000).
	LogRetain int64
	// PollInterval is how often a watcher looks for writes made by other
	// processes (default 100ms).
	PollInterval time.Duration
	// NoSync skips fsync. It loses data on power failure: tests only.
	NoSync bool
	// AckApplied (with HoldOpen) lets Write return as soon as its compares
	// have held and its writes are in bbolt's open transaction, before
	// bbolt writes and fsyncs them; Sync and Close wait for that and
	// report a failure. For a process that holds the file for one
	// operation and reports success only after Sync: a plugin's ADD wires
	// the pod with its address while the commit's two fsyncs run. Nobody
	// else can see or take the address meanwhile (the file stays locked),
	// reads wait for pending commits (they see the process's own writes),
	// and after a failed commit every call fails with its error.
	AckApplied bool
}

// Store is an ipam.Store over one bbolt file.
type Store struct {
	opts Options

	db   *bolt.DB  // HoldOpen only
	lock *fileLock // HoldOpen only
	reqs chan *txnReq
	// sendMu orders sends on reqs before Close closes it.
	sendMu     sync.RWMutex
	reqsClosed bool

	mu      sync.Mutex
	changed chan struct{} // closed and replaced after each local commit
	closed  bool
	// commitErr is the failure of a commit whose writes were acknowledged
	// before it (AckApplied); it fails every later call.
	commitErr error
	// unsynced counts commits of acknowledged writes still under way.
	unsynced atomic.Int32
	done     chan struct{}
	wg       sync.WaitGroup
}

var (
	_ ipam.Store   = (*Store)(nil)
	_ ipam.Watcher = (*Store)(nil)
)

var (
	kvBucket   = []byte("kv")
	metaBucket = []byte("meta")
	logBucket  = []byte("log")
	revKey     = []byte("rev")
	compactKey = []byte("compact")
)

// Open returns a Store for opts.Path, creating the file if needed.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if opts.Path == "" {
		return nil, errors.New("bolt store: empty path")
	}
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = 10 * time.Second
	}
	if opts.LogRetain <= 0 {
		opts.LogRetain = 10000
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 100 * time.Millisecond
	}
	if opts.AckApplied && !opts.HoldOpen {
		return nil, errors.New("bolt store: AckApplied needs HoldOpen")
	}
	s := &Store{opts: opts, changed: make(chan struct{}), done: make(chan struct{})}
	if opts.HoldOpen {
		l, db, err := s.open(ctx)
		if err != nil {
			return nil, err
		}
		s.db, s.lock = db, l
		s.reqs = make(chan *txnReq, 1024)
		s.wg.Add(1)
		go s.commitLoop()
		return s, nil
	}
	// Create the file and buckets now, so errors show at Open.
	return s, s.withDB(ctx, func(*bolt.DB) error { return nil })
}

// open locks and opens the database and makes sure the buckets exist.
func (s *Store) open(ctx context.Context) (*fileLock, *bolt.DB, error) {
	l, err := lockFile(ctx, s.opts.Path+".lock", s.opts.LockTimeout)
	if err != nil {
		return nil, nil, err
	}
	// The side lock is ours, so bbolt's own flock is free; the timeout
	// only guards against a foreign program holding the file.
	// The freelist is synced so that an open reads it in one page instead
	// of scanning the whole file, which per-operation use pays each time.
	db, err := bolt.Open(s.opts.Path, 0o600, &bolt.Options{Timeout: time.Second, NoSync: s.opts.NoSync})
	if err != nil {
		l.unlock()
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, nil, fmt.Errorf("open %s: %w", s.opts.Path, ipam.ErrUnavailable)
		}
		return nil, nil, fmt.Errorf("open %s: %w", s.opts.Path, err)
	}
	// Look before writing: a write transaction costs two fsyncs, and a
	// per-operation store opens the file several times per allocation.
	ready := false
	db.View(func(tx *bolt.Tx) error {
		ready = tx.Bucket(kvBucket) != nil && tx.Bucket(metaBucket) != nil && tx.Bucket(logBucket) != nil
		return nil
	})
	if ready {
		return l, db, nil
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{kvBucket, metaBucket, logBucket} {
			if tx.Bucket(b) == nil {
				if _, err := tx.CreateBucket(b); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		l.unlock()
		return nil, nil, fmt.Errorf("open %s: %w", s.opts.Path, err)
	}
	return l, db, nil
}

// withDB runs fn with the database: the held one, or one opened and
// closed around fn.
func (s *Store) withDB(ctx context.Context, fn func(*bolt.DB) error) error {
	if err := s.checkOpen(ctx); err != nil {
		return err
	}
	if s.db != nil {
		return fn(s.db)
	}
	l, db, err := s.open(ctx)
	if err != nil {
		return err
	}
	defer l.unlock()
	err = fn(db)
	if cerr := db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close %s: %w", s.opts.Path, cerr)
	}
	return err
}

func (s *Store) checkOpen(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("bolt store: %w (%w)", ipam.ErrUnavailable, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("bolt store %s: closed: %w", s.opts.Path, ipam.ErrUnavailable)
	}
	return nil
}

// Get implements ipam.Store.
func (s *Store) Get(ctx context.Context, key string) (ipam.KV, error) {
	if err := s.syncBeforeRead(ctx); err != nil {
		return ipam.KV{}, err
	}
	var kv ipam.KV
	found := false
	err := s.withDB(ctx, func(db *bolt.DB) error {
		return db.View(func(tx *bolt.Tx) error {
			if v := tx.Bucket(kvBucket).Get([]byte(key)); v != nil {
				kv, found = decodeKV(key, v), true
			}
			return nil
		})
	})
	if err != nil {
		return ipam.KV{}, err
	}
	if !found {
		return ipam.KV{}, fmt.Errorf("%s: %w", key, ipam.ErrNotFound)
	}
	return kv, nil
}

// List implements ipam.Store.
func (s *Store) List(ctx context.Context, prefix string) ([]ipam.KV, error) {
	kvs, _, err := s.ListRev(ctx, prefix)
	return kvs, err
}

// ListRev implements ipam.Watcher.
func (s *Store) ListRev(ctx context.Context, prefix string) ([]ipam.KV, int64, error) {
	if err := s.syncBeforeRead(ctx); err != nil {
		return nil, 0, err
	}
	var out []ipam.KV
	var rev int64
	err := s.withDB(ctx, func(db *bolt.DB) error {
		return db.View(func(tx *bolt.Tx) error {
			rev = getInt(tx.Bucket(metaBucket), revKey)
			c := tx.Bucket(kvBucket).Cursor()
			p := []byte(prefix)
			for k, v := c.Seek(p); k != nil && strings.HasPrefix(string(k), prefix); k, v = c.Next() {
				out = append(out, decodeKV(string(k), v))
			}
			return nil
		})
	})
	return out, rev, err
}

// txn applies ops atomically if every compare holds, and returns the new
// store revision; a failed compare returns ErrConflict and changes
// nothing. The allocator's writes are single keys (Write); the store
// keeps the general form for its change log and group commit.
func (s *Store) txn(ctx context.Context, cmps []compare, ops []op) (int64, error) {
	if err := checkOps(ops); err != nil {
		return 0, err
	}
	if s.db != nil {
		return s.groupTxn(ctx, cmps, ops)
	}
	var rev int64
	var txErr error
	err := s.withDB(ctx, func(db *bolt.DB) error {
		return db.Update(func(tx *bolt.Tx) error {
			rev, txErr = s.apply(tx, cmps, ops)
			if errors.Is(txErr, ipam.ErrConflict) {
				return nil // nothing written; let bbolt end the tx
			}
			return txErr
		})
	})
	if err != nil {
		return 0, err
	}
	if txErr != nil {
		return 0, txErr
	}
	s.notify()
	return rev, nil
}

// checkOps rejects a key written twice in one txn, as etcd does.
func checkOps(ops []op) error {
	seen := make(map[string]bool, len(ops))
	for _, op := range ops {
		if op.key == "" {
			return errors.New("bolt store: txn op with empty key")
		}
		if seen[op.key] {
			return fmt.Errorf("bolt store: key %q written twice in one txn", op.key)
		}
		seen[op.key] = true
	}
	return nil
}

// notify wakes local watchers.
func (s *Store) notify() {
	s.mu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

func (s *Store) changedCh() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Close implements ipam.Store. It ends watches and, with HoldOpen, waits
// for queued transactions and releases the file.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	s.mu.Unlock()
	if s.reqs != nil {
		s.sendMu.Lock()
		s.reqsClosed = true
		close(s.reqs)
		s.sendMu.Unlock()
	}
	s.wg.Wait()
	if s.db == nil {
		return nil
	}
	err := s.db.Close()
	s.lock.unlock()
	return errors.Join(s.failed(), err)
}

// Write implements ipam.Store: one key, through txn.
func (s *Store) Write(ctx context.Context, w ipam.Write) (int64, error) {
	var cmps []compare
	if w.ModRevision != ipam.AnyRevision {
		cmps = []compare{{key: w.Key, modRev: w.ModRevision}}
	}
	rev, err := s.txn(ctx, cmps, []op{{key: w.Key, value: w.Value, del: w.Delete}})
	if err != nil || w.Delete {
		return 0, err
	}
	return rev, nil
}
