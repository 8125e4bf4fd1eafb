package agentsock_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/agentsock"
)

// TestCacheForeignWrite: a write to the backend behind the server's back
// (another node, the CLI) costs the client one conflict, after which it
// reads the new value; a FreshRead sees it at once.
func TestCacheForeignWrite(t *testing.T) {
	ctx := t.Context()
	backend := boltStore(t)
	s := serve(t, backend, agentsock.Options{})
	c := client(t, s.path)
	r1, err := c.Write(ctx, ipam.Write{Key: "/blk", Value: []byte("1")})
	if err != nil {
		t.Fatal(err)
	}
	if kv, err := c.Get(ctx, "/blk"); err != nil || kv.ModRevision != r1 || string(kv.Value) != "1" {
		t.Fatalf("Get after the write = %+v, %v", kv, err)
	}
	if st := s.srv.Stats(); st.Hits != 1 || st.Reads != 0 {
		t.Fatalf("a Get after a write-through: %+v, want 1 hit, no read", st)
	}
	r2, err := backend.Write(ctx, ipam.Write{Key: "/blk", ModRevision: r1, Value: []byte("2")})
	if err != nil {
		t.Fatal(err)
	}
	// The cache lags: the client sees 1, its CAS conflicts.
	kv, err := c.Get(ctx, "/blk")
	if err != nil || kv.ModRevision != r1 {
		t.Fatalf("cached Get = %+v, %v; want the cached revision %d", kv, err, r1)
	}
	if fresh, err := c.Get(ipam.FreshRead(ctx), "/blk"); err != nil || fresh.ModRevision != r2 || string(fresh.Value) != "2" {
		t.Fatalf("FreshRead Get = %+v, %v; want 2 at %d", fresh, err, r2)
	}
	// The fresh read refreshed the cache: no conflict is left to pay.
	if kv, err := c.Get(ctx, "/blk"); err != nil || kv.ModRevision != r2 {
		t.Fatalf("Get after a fresh read = %+v, %v; want revision %d", kv, err, r2)
	}
	r3, err := backend.Write(ctx, ipam.Write{Key: "/blk", ModRevision: r2, Value: []byte("3")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(ctx, ipam.Write{Key: "/blk", ModRevision: r2, Value: []byte("x")}); !errors.Is(err, ipam.ErrConflict) {
		t.Fatalf("CAS on the stale revision: %v, want ErrConflict", err)
	}
	if kv, err := c.Get(ctx, "/blk"); err != nil || kv.ModRevision != r3 || string(kv.Value) != "3" {
		t.Fatalf("Get after the conflict = %+v, %v; want 3 at %d", kv, err, r3)
	}
	if _, err := c.Write(ctx, ipam.Write{Key: "/blk", ModRevision: r3, Value: []byte("4")}); err != nil {
		t.Fatalf("CAS after the re-read: %v", err)
	}
	st := s.srv.Stats()
	if st.Conflicts != 1 || st.Fresh != 1 || st.Reads != 2 || st.Hits != 3 || st.Writes != 3 {
		t.Fatalf("stats %+v, want 1 conflict, 2 backend reads (1 fresh, 1 after the conflict), 3 hits, 3 writes", st)
	}
}

// TestCacheDeleteAndMissing: a delete evicts, a missing key is not
// cached, and a key created behind the back is found.
func TestCacheDeleteAndMissing(t *testing.T) {
	ctx := t.Context()
	backend := boltStore(t)
	s := serve(t, backend, agentsock.Options{})
	c := client(t, s.path)
	rev, err := c.Write(ctx, ipam.Write{Key: "/k", Value: []byte("1")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(ctx, ipam.Write{Key: "/k", ModRevision: rev, Delete: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "/k"); !errors.Is(err, ipam.ErrNotFound) {
		t.Fatalf("Get after delete: %v, want ErrNotFound", err)
	}
	if _, err := backend.Write(ctx, ipam.Write{Key: "/k", Value: []byte("2")}); err != nil {
		t.Fatal(err)
	}
	if kv, err := c.Get(ctx, "/k"); err != nil || string(kv.Value) != "2" {
		t.Fatalf("Get of a key created behind the back = %+v, %v", kv, err)
	}
}

// TestCacheUnconditionalWrite: an unconditional write of a key the cache
// does not hold is written through: the next Get needs no read.
func TestCacheUnconditionalWrite(t *testing.T) {
	ctx := t.Context()
	backend := boltStore(t)
	s := serve(t, backend, agentsock.Options{})
	c := client(t, s.path)
	if _, err := backend.Write(ctx, ipam.Write{Key: "/k", Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	rev, err := c.Write(ctx, ipam.Write{Key: "/k", ModRevision: ipam.AnyRevision, Value: []byte("2")})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := c.Get(ctx, "/k")
	if err != nil || kv.ModRevision != rev || string(kv.Value) != "2" {
		t.Fatalf("Get = %+v, %v; want 2 at %d", kv, err, rev)
	}
	if st := s.srv.Stats(); st.Reads != 0 || st.Hits != 1 {
		t.Fatalf("stats %+v: want the Get answered from the cache", st)
	}
}

// TestCacheBounded: more keys than the cache holds still read right.
func TestCacheBounded(t *testing.T) {
	ctx := t.Context()
	s := serve(t, boltStore(t), agentsock.Options{CacheEntries: 4})
	c := client(t, s.path)
	revs := map[string]int64{}
	for i := range 20 {
		k := fmt.Sprintf("/k/%02d", i)
		rev, err := c.Write(ctx, ipam.Write{Key: k, Value: []byte(k)})
		if err != nil {
			t.Fatal(err)
		}
		revs[k] = rev
	}
	for range 2 {
		for k, rev := range revs {
			if kv, err := c.Get(ctx, k); err != nil || kv.ModRevision != rev || string(kv.Value) != k {
				t.Fatalf("Get(%s) = %+v, %v; want revision %d", k, kv, err, rev)
			}
		}
	}
}

// TestErrorIdentity: each error the backend returns keeps its identity
// and its message across the socket.
func TestErrorIdentity(t *testing.T) {
	ctx := t.Context()
	for _, want := range []error{ipam.ErrNotFound, ipam.ErrConflict, ipam.ErrUnavailable, ipam.ErrWrite, ipam.ErrCompacted, errors.ErrUnsupported, ipam.ErrDenied, nil} {
		name := "other"
		if want != nil {
			name = want.Error()
		}
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			msg := "backend store: object 10-244-0-0-26: it failed"
			var err error = errors.New(msg)
			if want != nil {
				err = fmt.Errorf("%s: %w", msg, want)
			}
			c := client(t, serve(t, failingStore{err: err}, agentsock.Options{}).path)
			for op, got := range map[string]error{
				"Get":   second(c.Get(ctx, "/k")),
				"List":  second(c.List(ctx, "/")),
				"Write": second(c.Write(ctx, ipam.Write{Key: "/k", Value: []byte("v")})),
			} {
				if got == nil || got.Error() != err.Error() {
					t.Errorf("%s: err = %v, want %q", op, got, err)
				}
				for _, s := range []error{ipam.ErrNotFound, ipam.ErrConflict, ipam.ErrUnavailable, ipam.ErrWrite, ipam.ErrCompacted, errors.ErrUnsupported, ipam.ErrDenied} {
					if errors.Is(got, s) != (s == want) {
						t.Errorf("%s: errors.Is(%v, %v) = %v", op, got, s, !(s == want))
					}
				}
			}
		})
	}
}

func second[T any](_ T, err error) error { return err }

// failingStore fails every call with err.
type failingStore struct{ err error }

func (f failingStore) Get(context.Context, string) (ipam.KV, error)     { return ipam.KV{}, f.err }
func (f failingStore) List(context.Context, string) ([]ipam.KV, error)  { return nil, f.err }
func (f failingStore) Write(context.Context, ipam.Write) (int64, error) { return 0, f.err }
func (f failingStore) Close() error                                     { return nil }

// TestListCache: Lists of a cached prefix are answered from the cache
// for the TTL, a write through the server under it evicts at once, one
// behind its back is seen after the TTL, FreshRead reads the backend, and
// other prefixes are never cached.
func TestListCache(t *testing.T) {
	ctx := t.Context()
	backend := boltStore(t)
	const ttl = 300 * time.Millisecond
	s := serve(t, backend, agentsock.Options{CachedLists: []string{"/pools/"}, ListTTL: ttl})
	c := client(t, s.path)
	keys := func(prefix string, fresh bool) []string {
		t.Helper()
		lctx := ctx
		if fresh {
			lctx = ipam.FreshRead(ctx)
		}
		kvs, err := c.List(lctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, kv := range kvs {
			out = append(out, kv.Key)
		}
		return out
	}
	if _, err := c.Write(ctx, ipam.Write{Key: "/pools/a", Value: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	if got := keys("/pools/", false); !slices.Equal(got, []string{"/pools/a"}) {
		t.Fatalf("List = %q", got)
	}
	if _, err := c.Write(ctx, ipam.Write{Key: "/pools/b", Value: []byte("b")}); err != nil {
		t.Fatal(err)
	}
	if got := keys("/pools/", false); !slices.Equal(got, []string{"/pools/a", "/pools/b"}) {
		t.Fatalf("List after a write through the server = %q, want it seen at once", got)
	}
	start := time.Now()
	if _, err := backend.Write(ctx, ipam.Write{Key: "/pools/c", Value: []byte("c")}); err != nil {
		t.Fatal(err)
	}
	stale := keys("/pools/", false)
	if len(stale) != 2 && time.Since(start) < ttl {
		t.Fatalf("List within the TTL = %q, want the cached answer", stale)
	}
	if got := keys("/pools/", true); len(got) != 3 {
		t.Fatalf("FreshRead List = %q, want the backend's 3 keys", got)
	}
	time.Sleep(ttl)
	if got := keys("/pools/", false); len(got) != 3 {
		t.Fatalf("List after the TTL = %q, want 3 keys", got)
	}
	before := s.srv.Stats()
	keys("/other/", false)
	keys("/other/", false)
	if st := s.srv.Stats(); st.ListHits != before.ListHits {
		t.Fatalf("Lists of an uncached prefix hit the cache: %+v", st)
	}
}

// TestStaleCacheDecisions: the allocator through the socket, whose cache
// missed a DEL and an ADD made behind its back (by the CLI, or another
// node's agent): a repeated ADD does not hand back the address released
// since, and a DEL does not leave the address allocated since. Both write
// nothing on the cache's word, so only a fresh read can tell.
func TestStaleCacheDecisions(t *testing.T) {
	ctx := t.Context()
	backend := boltStore(t)
	s := serve(t, backend, agentsock.Options{})
	plugin := ipam.New(client(t, s.path), ipam.Config{})
	cli := ipam.New(backend, ipam.Config{})
	if err := cli.PutPool(ctx, ipam.Pool{Name: "p", CIDR: netip.MustParsePrefix("10.9.0.0/16")}); err != nil {
		t.Fatal(err)
	}
	add := ipam.AutoAssignArgs{Handle: "net.c1", Node: "n1", Num4: 1}
	if _, err := plugin.AutoAssign(ctx, add); err != nil {
		t.Fatal(err)
	}
	if err := cli.ReleaseByHandle(ctx, "n1", "net.c1"); err != nil {
		t.Fatal(err)
	}
	got, err := plugin.AutoAssign(ctx, add)
	if err != nil {
		t.Fatal(err)
	}
	if held, err := cli.IPsByHandle(ctx, "n1", "net.c1"); err != nil || !slices.Equal(held, got.IPv4) {
		t.Fatalf("repeated ADD answered %v, but the handle holds %v (%v)", got.IPv4, held, err)
	}
	if _, err := cli.AutoAssign(ctx, ipam.AutoAssignArgs{Handle: "net.c2", Node: "n1", Num4: 1}); err != nil {
		t.Fatal(err)
	}
	if err := plugin.ReleaseByHandle(ctx, "n1", "net.c2"); err != nil {
		t.Fatal(err)
	}
	if held, err := cli.IPsByHandle(ctx, "n1", "net.c2"); err != nil || len(held) != 0 {
		t.Fatalf("DEL through the socket left %v (%v)", held, err)
	}
	if st := s.srv.Stats(); st.Fresh == 0 {
		t.Errorf("stats %+v: no fresh read", st)
	}
}

// TestServerStoreSharesCache: the agent's own writes through
// Server.Store update the cache the socket's clients read, so a client's
// next CAS on the key finds the current revision instead of a conflict.
func TestServerStoreSharesCache(t *testing.T) {
	ctx := t.Context()
	s := serve(t, boltStore(t), agentsock.Options{})
	c := client(t, s.path)
	r1, err := c.Write(ctx, ipam.Write{Key: "/blk", Value: []byte("1")})
	if err != nil {
		t.Fatal(err)
	}
	own := s.srv.Store()
	kv, err := own.Get(ctx, "/blk")
	if err != nil || kv.ModRevision != r1 {
		t.Fatalf("the agent's Get = %+v, %v; want revision %d", kv, err, r1)
	}
	r2, err := own.Write(ctx, ipam.Write{Key: "/blk", ModRevision: r1, Value: []byte("2")})
	if err != nil {
		t.Fatal(err)
	}
	if kv, err := c.Get(ctx, "/blk"); err != nil || kv.ModRevision != r2 || string(kv.Value) != "2" {
		t.Fatalf("the client's Get after the agent's write = %+v, %v; want 2 at %d", kv, err, r2)
	}
	if _, err := c.Write(ctx, ipam.Write{Key: "/blk", ModRevision: r2, Value: []byte("3")}); err != nil {
		t.Fatalf("the client's CAS after the agent's write: %v", err)
	}
	if st := s.srv.Stats(); st.Conflicts != 0 || st.Writes != 3 {
		t.Fatalf("stats %+v, want 3 writes and no conflict", st)
	}
	if kv, err := own.Get(ipam.FreshRead(ctx), "/blk"); err != nil || string(kv.Value) != "3" {
		t.Fatalf("the agent's fresh Get = %+v, %v; want 3", kv, err)
	}
	if kvs, err := own.List(ctx, "/"); err != nil || len(kvs) != 1 {
		t.Fatalf("the agent's List = %v, %v; want the one key", kvs, err)
	}
	if err := own.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "/blk"); err != nil {
		t.Fatalf("closing the agent's view closed the backend: %v", err)
	}
}
