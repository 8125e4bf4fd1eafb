package agentsock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/podnet/podnet/internal/wire"
	"github.com/podnet/podnet/ipam"
)

// Options configure a Server.
type Options struct {
	// CacheEntries bounds the Get cache (0: DefaultCacheEntries); a
	// negative value disables it.
	CacheEntries int
	// CachedLists are key prefixes whose List answers are kept for
	// ListTTL (0: DefaultListTTL), for a List of exactly that prefix:
	// the pools' (ipam.Keys.Pools()), which every AutoAssign lists and
	// which change rarely. A write through the server under the prefix
	// evicts the answer; one behind its back is seen within the TTL.
	// None by default: every List reads the backend.
	CachedLists []string
	ListTTL     time.Duration
}

// Stats count what the server did, for tests and metrics.
type Stats struct {
	// Hits are Gets answered from the cache; Reads, Gets that read the
	// backend (misses and fresh reads); Fresh, those that asked for it.
	Hits, Reads, Fresh uint64
	// Lists and Writes are the calls of each kind; ListHits, the Lists
	// answered from the cache; Conflicts, the Writes the backend refused
	// on their revision.
	Lists, ListHits, Writes, Conflicts uint64
}

// Server serves an ipam.Store to clients on a listener.
type Server struct {
	backend ipam.Store
	cache   *cache     // nil: disabled
	lists   *listCache // nil: no List cached

	hits, reads, fresh, nlists, listHits, writes, conflicts atomic.Uint64
}

// NewServer returns a server of backend. The backend stays the caller's:
// the server does not close it.
func NewServer(backend ipam.Store, o Options) *Server {
	s := &Server{backend: backend, lists: newListCache(o.CachedLists, o.ListTTL)}
	switch {
	case o.CacheEntries == 0:
		s.cache = newCache(DefaultCacheEntries)
	case o.CacheEntries > 0:
		s.cache = newCache(o.CacheEntries)
	}
	return s
}

// Serve serves backend on l until ctx ends: NewServer(backend,
// o).Serve(ctx, l).
func Serve(ctx context.Context, l net.Listener, backend ipam.Store, o Options) error {
	return NewServer(backend, o).Serve(ctx, l)
}

// Stats returns the counts so far.
func (s *Server) Stats() Stats {
	return Stats{Hits: s.hits.Load(), Reads: s.reads.Load(), Fresh: s.fresh.Load(),
		Lists: s.nlists.Load(), ListHits: s.listHits.Load(), Writes: s.writes.Load(), Conflicts: s.conflicts.Load()}
}

// Serve accepts connections on l and answers their calls until ctx ends,
// then closes l and every connection and waits for the calls in flight
// to return. It returns nil after ctx ended, or the error that stopped
// accepting.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]struct{}{}
	stop := context.AfterFunc(ctx, func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for c := range conns {
			c.Close()
		}
	})
	defer stop()
	defer wg.Wait()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			l.Close()
			return fmt.Errorf("agent store server: accept: %w", err)
		}
		mu.Lock()
		if ctx.Err() != nil {
			mu.Unlock()
			c.Close()
			return nil
		}
		conns[c] = struct{}{}
		mu.Unlock()
		wg.Go(func() {
			s.serveConn(ctx, c)
			mu.Lock()
			delete(conns, c)
			mu.Unlock()
			c.Close()
		})
	}
}

// serveConn answers c's requests, one at a time, until c or ctx ends.
func (s *Server) serveConn(ctx context.Context, c net.Conn) {
	r := bufio.NewReaderSize(c, 32<<10)
	var in, out []byte
	for {
		frame, err := wire.ReadFrame(r, in, maxRequest)
		if err != nil {
			return // EOF: the client is done; anything else ends it too
		}
		in = frame
		req, err := decodeRequest(frame)
		if err != nil {
			return
		}
		out = s.answer(ctx, req, out)
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

// answer runs req within the client's deadline and encodes the answer
// into buf.
func (s *Server) answer(ctx context.Context, req request, buf []byte) []byte {
	if req.deadline != 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, time.Unix(0, req.deadline))
		defer cancel()
	}
	e := wire.Start(buf)
	var err error
	switch {
	case req.version != version:
		err = fmt.Errorf("agent store server: request of protocol version %d, this agent speaks %d (plugin and agent of different podnet versions): %w", req.version, version, errors.ErrUnsupported)
	case req.op == opGet:
		var kv ipam.KV
		if kv, err = s.get(ctx, req.key, req.flags&flagFresh != 0); err == nil {
			e.U8(statusOK)
			putKV(&e, kv)
		}
	case req.op == opList:
		var kvs []ipam.KV
		if kvs, err = s.list(ctx, req.key, req.flags&flagFresh != 0); err == nil {
			e.U8(statusOK)
			e.U32(len(kvs))
			for _, kv := range kvs {
				putKV(&e, kv)
			}
		}
	case req.op == opWrite:
		w := ipam.Write{Key: req.key, ModRevision: req.modRev, Value: req.value, Delete: req.flags&flagDelete != 0}
		var rev int64
		if rev, err = s.write(ctx, w); err == nil {
			e.U8(statusOK)
			e.I64(rev)
		}
	default:
		err = fmt.Errorf("agent store server: unknown operation %q: %w", req.op, errors.ErrUnsupported)
	}
	if err != nil {
		e = wire.Start(buf)
		e.U8(statusOf(err))
		e.Bytes32([]byte(err.Error()))
	}
	return e.Frame()
}

// get answers from the cache unless fresh, else reads the backend and
// keeps its answer.
func (s *Server) get(ctx context.Context, key string, fresh bool) (ipam.KV, error) {
	if s.cache == nil {
		s.reads.Add(1)
		return s.backend.Get(ctx, key)
	}
	if fresh {
		s.fresh.Add(1)
	} else if kv, ok := s.cache.get(key); ok {
		s.hits.Add(1)
		return kv, nil
	}
	s.reads.Add(1)
	token := s.cache.begin()
	kv, err := s.backend.Get(ctx, key)
	switch {
	case err == nil:
		s.cache.fill(kv, token)
	case errors.Is(err, ipam.ErrNotFound):
		s.cache.evict(key)
	}
	return kv, err
}

// list reads the backend, unless prefix's Lists are cached and a fresh
// enough answer is kept.
func (s *Server) list(ctx context.Context, prefix string, fresh bool) ([]ipam.KV, error) {
	s.nlists.Add(1)
	if !s.lists.covers(prefix) {
		return s.backend.List(ctx, prefix)
	}
	now := time.Now()
	if kvs, ok := s.lists.get(prefix, now); ok && !fresh {
		s.listHits.Add(1)
		return kvs, nil
	}
	token := s.lists.begin()
	kvs, err := s.backend.List(ctx, prefix)
	if err == nil {
		s.lists.fill(prefix, kvs, token, now)
	}
	return kvs, err
}

// write writes through: a success updates the cache, any failure evicts
// the key (a conflict: the next Get reads what the backend has; another
// failure: the write may or may not have been applied).
func (s *Server) write(ctx context.Context, w ipam.Write) (int64, error) {
	s.writes.Add(1)
	defer s.lists.wrote(w.Key)
	if s.cache == nil {
		rev, err := s.backend.Write(ctx, w)
		if errors.Is(err, ipam.ErrConflict) {
			s.conflicts.Add(1)
		}
		return rev, err
	}
	token := s.cache.begin()
	rev, err := s.backend.Write(ctx, w)
	if err != nil {
		if errors.Is(err, ipam.ErrConflict) {
			s.conflicts.Add(1)
		}
		s.cache.evict(w.Key)
		return rev, err
	}
	s.cache.wrote(w, rev, token)
	return rev, nil
}

// Store is the server's backend seen through its caches, for the agent's
// own calls in the same process (its GC, its removal of deleted nodes):
// their writes update the cache the socket's clients read, as a
// client's would, instead of leaving it to find them by a conflict.
// Close does nothing: the backend stays the caller's.
func (s *Server) Store() ipam.Store { return serverStore{s} }

type serverStore struct{ s *Server }

func (v serverStore) Get(ctx context.Context, key string) (ipam.KV, error) {
	return v.s.get(ctx, key, ipam.IsFreshRead(ctx))
}

func (v serverStore) List(ctx context.Context, prefix string) ([]ipam.KV, error) {
	return v.s.list(ctx, prefix, ipam.IsFreshRead(ctx))
}

func (v serverStore) Write(ctx context.Context, w ipam.Write) (int64, error) {
	return v.s.write(ctx, w)
}

func (serverStore) Close() error { return nil }
