// Package storetest is the conformance suite every ipam.Store must pass.
// It writes only under a key prefix unique to each subtest, so one store
// (say, one etcd cluster) may serve the whole suite.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/podnet/podnet/ipam"
)

// Run runs the suite. newStore is called once per subtest. A store that
// implements ipam.Watcher also runs the watch half.
func Run(t *testing.T, newStore func(t *testing.T) ipam.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s ipam.Store, p string)
	}{
		{"GetMissing", testGetMissing},
		{"CreateUpdateDelete", testWriteCreateUpdateDelete},
		{"DuplicateKeyRejected", testDuplicateKey},
		{"DeleteWithRevision", testWriteDeleteWithRevision},
		{"UpdateMissingIsConflict", testWriteUpdateMissing},
		{"List", testList},
		{"ConcurrentCAS", testWriteConcurrentCAS},
		{"CanceledContext", testCanceled},
	}
	watch := []struct {
		name string
		fn   func(t *testing.T, s ipam.Store, w ipam.Watcher, p string)
	}{
		{"ListRev", testListRev},
		{"WatchFromNow", testWatchFromNow},
		{"WatchReplay", testWatchReplay},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t)
			tt.fn(t, s, "/storetest/"+t.Name()+"/")
		})
	}
	for _, tt := range watch {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t)
			w, ok := s.(ipam.Watcher)
			if !ok {
				t.Skipf("%T is no ipam.Watcher", s)
			}
			tt.fn(t, s, w, "/storetest/"+t.Name()+"/")
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// put writes key unconditionally and returns its revision.
func put(t *testing.T, s ipam.Store, key, value string) int64 {
	t.Helper()
	return mustWrite(t, s, ipam.Write{Key: key, ModRevision: ipam.AnyRevision, Value: []byte(value)})
}

func mustGet(t *testing.T, s ipam.Store, key string) ipam.KV {
	t.Helper()
	kv, err := s.Get(ctxT(t), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return kv
}

func testGetMissing(t *testing.T, s ipam.Store, p string) {
	if _, err := s.Get(ctxT(t), p+"nope"); !errors.Is(err, ipam.ErrNotFound) {
		t.Fatalf("Get missing: err = %v, want ErrNotFound", err)
	}
}

// testDuplicateKey: creating a key that exists is a conflict and leaves
// the key as it was.
func testDuplicateKey(t *testing.T, s ipam.Store, p string) {
	k := p + "k"
	r := put(t, s, k, "1")
	if _, err := s.Write(ctxT(t), ipam.Write{Key: k, Value: []byte("2")}); !errors.Is(err, ipam.ErrConflict) {
		t.Fatalf("create of an existing key: err = %v, want ErrConflict", err)
	}
	if kv := mustGet(t, s, k); string(kv.Value) != "1" || kv.ModRevision != r {
		t.Fatalf("a refused create changed the key: %+v", kv)
	}
}
func testList(t *testing.T, s ipam.Store, p string) {
	for _, k := range []string{"b/2", "a", "b/1", "b/10", "bb", "c"} {
		put(t, s, p+k, k)
	}
	kvs, err := s.List(ctxT(t), p+"b/")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, kv := range kvs {
		got = append(got, string(kv.Value))
		if kv.ModRevision == 0 || kv.Key != p+string(kv.Value) {
			t.Errorf("bad entry %+v", kv)
		}
	}
	if fmt.Sprint(got) != "[b/1 b/10 b/2]" {
		t.Fatalf("List(b/) = %v, want [b/1 b/10 b/2]", got)
	}
	if kvs, err := s.List(ctxT(t), p+"zzz/"); err != nil || len(kvs) != 0 {
		t.Fatalf("List of nothing = %v, %v", kvs, err)
	}
}

// testListRev: the revision of a list is at least that of the writes it
// saw.
func testListRev(t *testing.T, s ipam.Store, w ipam.Watcher, p string) {
	last := put(t, s, p+"a", "1")
	kvs, rev, err := w.ListRev(ctxT(t), p)
	if err != nil || len(kvs) != 1 {
		t.Fatalf("ListRev = %v, %v", kvs, err)
	}
	if rev < last {
		t.Fatalf("ListRev revision %d older than the last write %d", rev, last)
	}
}

// collect reads events from ch until it has n or times out.
func collect(t *testing.T, ch <-chan ipam.WatchResponse, n int) []ipam.Event {
	t.Helper()
	var evs []ipam.Event
	timeout := time.After(10 * time.Second)
	for len(evs) < n {
		select {
		case r, ok := <-ch:
			if !ok {
				t.Fatalf("watch closed after %d events", len(evs))
			}
			if r.Err != nil {
				t.Fatalf("watch error: %v", r.Err)
			}
			evs = append(evs, r.Events...)
		case <-timeout:
			t.Fatalf("got %d events, want %d", len(evs), n)
		}
	}
	return evs
}

func checkEvents(t *testing.T, evs []ipam.Event, want []ipam.Event) {
	t.Helper()
	if len(evs) != len(want) {
		t.Fatalf("events %+v, want %+v", evs, want)
	}
	for i := range want {
		g, w := evs[i], want[i]
		if g.Type != w.Type || g.KV.Key != w.KV.Key || string(g.KV.Value) != string(w.KV.Value) || g.KV.ModRevision != w.KV.ModRevision {
			t.Fatalf("event %d = %+v, want %+v", i, g, w)
		}
	}
}

func testWatchFromNow(t *testing.T, s ipam.Store, w ipam.Watcher, p string) {
	ctx, cancel := context.WithCancel(ctxT(t))
	put(t, s, p+"w/before", "old")
	ch, err := w.Watch(ctx, p+"w/", 0)
	if err != nil {
		t.Fatal(err)
	}
	r1 := put(t, s, p+"w/a", "1")
	put(t, s, p+"other", "x")
	mustWrite(t, s, ipam.Write{Key: p + "w/a", ModRevision: r1, Delete: true})
	// The delete's revision: nothing else writes to this store meanwhile.
	_, r2, err := w.ListRev(ctxT(t), p+"none/")
	if err != nil {
		t.Fatal(err)
	}
	checkEvents(t, collect(t, ch, 2), []ipam.Event{
		{Type: ipam.EventPut, KV: ipam.KV{Key: p + "w/a", Value: []byte("1"), ModRevision: r1}},
		{Type: ipam.EventDelete, KV: ipam.KV{Key: p + "w/a", ModRevision: r2}},
	})
	cancel()
	// The channel must close once ctx ends.
	timeout := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatal("watch channel still open after cancel")
		}
	}
}

func testWatchReplay(t *testing.T, s ipam.Store, w ipam.Watcher, p string) {
	r1 := put(t, s, p+"a", "1")
	r2 := put(t, s, p+"b", "2")
	ch, err := w.Watch(ctxT(t), p, r1)
	if err != nil {
		t.Fatal(err)
	}
	r3 := put(t, s, p+"a", "3")
	checkEvents(t, collect(t, ch, 3), []ipam.Event{
		{Type: ipam.EventPut, KV: ipam.KV{Key: p + "a", Value: []byte("1"), ModRevision: r1}},
		{Type: ipam.EventPut, KV: ipam.KV{Key: p + "b", Value: []byte("2"), ModRevision: r2}},
		{Type: ipam.EventPut, KV: ipam.KV{Key: p + "a", Value: []byte("3"), ModRevision: r3}},
	})
}

func testCanceled(t *testing.T, s ipam.Store, p string) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Get(ctx, p+"k"); !errors.Is(err, ipam.ErrUnavailable) {
		t.Errorf("Get with canceled ctx: err = %v, want ErrUnavailable", err)
	}
	if _, err := s.Write(ctx, ipam.Write{Key: p + "k", ModRevision: ipam.AnyRevision}); !errors.Is(err, ipam.ErrUnavailable) {
		t.Errorf("Write with canceled ctx: err = %v, want ErrUnavailable", err)
	}
}

func mustWrite(t *testing.T, s ipam.Store, w ipam.Write) int64 {
	t.Helper()
	rev, err := s.Write(ctxT(t), w)
	if err != nil {
		t.Fatalf("Write(%s at %d, delete=%v): %v", w.Key, w.ModRevision, w.Delete, err)
	}
	return rev
}

func testWriteCreateUpdateDelete(t *testing.T, s ipam.Store, p string) {
	k := p + "k"
	r1 := mustWrite(t, s, ipam.Write{Key: k, Value: []byte("v1")})
	if kv := mustGet(t, s, k); string(kv.Value) != "v1" || kv.ModRevision != r1 {
		t.Fatalf("after create: %+v, want v1 at %d", kv, r1)
	}
	if _, err := s.Write(ctxT(t), ipam.Write{Key: k, Value: []byte("x")}); !errors.Is(err, ipam.ErrConflict) {
		t.Fatalf("create of an existing key: err = %v, want ErrConflict", err)
	}
	r2 := mustWrite(t, s, ipam.Write{Key: k, ModRevision: r1, Value: []byte("v2")})
	if r2 == r1 {
		t.Fatalf("update kept revision %d", r1)
	}
	if _, err := s.Write(ctxT(t), ipam.Write{Key: k, ModRevision: r1, Value: []byte("stale")}); !errors.Is(err, ipam.ErrConflict) {
		t.Fatalf("update at a stale revision: err = %v, want ErrConflict", err)
	}
	r3 := mustWrite(t, s, ipam.Write{Key: k, ModRevision: ipam.AnyRevision, Value: []byte("v3")})
	if kv := mustGet(t, s, k); string(kv.Value) != "v3" || kv.ModRevision != r3 {
		t.Fatalf("after unconditional put: %+v, want v3 at %d", kv, r3)
	}
	if rev := mustWrite(t, s, ipam.Write{Key: k, ModRevision: r3, Delete: true}); rev != 0 {
		t.Fatalf("delete returned revision %d, want 0", rev)
	}
	if _, err := s.Get(ctxT(t), k); !errors.Is(err, ipam.ErrNotFound) {
		t.Fatalf("after delete: err = %v, want ErrNotFound", err)
	}
	mustWrite(t, s, ipam.Write{Key: k, ModRevision: ipam.AnyRevision, Delete: true})
}

func testWriteDeleteWithRevision(t *testing.T, s ipam.Store, p string) {
	k := p + "k"
	r1 := mustWrite(t, s, ipam.Write{Key: k, Value: []byte("v1")})
	r2 := mustWrite(t, s, ipam.Write{Key: k, ModRevision: r1, Value: []byte("v2")})
	if _, err := s.Write(ctxT(t), ipam.Write{Key: k, ModRevision: r1, Delete: true}); !errors.Is(err, ipam.ErrConflict) {
		t.Fatalf("delete at a stale revision: err = %v, want ErrConflict", err)
	}
	if kv := mustGet(t, s, k); string(kv.Value) != "v2" {
		t.Fatalf("a refused delete changed the key: %+v", kv)
	}
	mustWrite(t, s, ipam.Write{Key: k, ModRevision: r2, Delete: true})
}

func testWriteUpdateMissing(t *testing.T, s ipam.Store, p string) {
	k := p + "gone"
	r1 := mustWrite(t, s, ipam.Write{Key: k, Value: []byte("v1")})
	mustWrite(t, s, ipam.Write{Key: k, ModRevision: r1, Delete: true})
	if _, err := s.Write(ctxT(t), ipam.Write{Key: k, ModRevision: r1, Value: []byte("v2")}); !errors.Is(err, ipam.ErrConflict) {
		t.Fatalf("update of a deleted key: err = %v, want ErrConflict", err)
	}
	if _, err := s.Write(ctxT(t), ipam.Write{Key: k, ModRevision: r1, Delete: true}); !errors.Is(err, ipam.ErrConflict) {
		t.Fatalf("conditional delete of a deleted key: err = %v, want ErrConflict", err)
	}
	if _, err := s.Get(ctxT(t), k); !errors.Is(err, ipam.ErrNotFound) {
		t.Fatalf("a refused update created the key: err = %v", err)
	}
}

// testWriteConcurrentCAS has writers race read-modify-write on one key:
// every increment lands exactly once (RunWrites' case, on raw values).
func testWriteConcurrentCAS(t *testing.T, s ipam.Store, p string) {
	shapedConcurrentCAS(t, s, p, RawShape())
}
