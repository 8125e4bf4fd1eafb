package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/podnet/podnet/ipam"
)

// Shape says which keys and values a store can hold, for RunWrites: a
// store may take any (bbolt, etcd: RawShape) or only the allocator's
// objects (the Kubernetes store: IPAMShape).
type Shape struct {
	// Key is the i-th key under ListPrefix(prefix); distinct i give
	// distinct keys.
	Key func(prefix string, i int) string
	// Value is a value for key that carries n; Count reads n back.
	Value func(key string, n int) []byte
	Count func(value []byte) (int, error)
	// Other is the i-th key under prefix but not under ListPrefix(prefix),
	// with a value for it.
	Other      func(prefix string, i int) (string, []byte)
	ListPrefix func(prefix string) string
}

// RawShape is any key and value: what bbolt and etcd hold.
func RawShape() Shape {
	return Shape{
		Key:   func(p string, i int) string { return p + "b/" + strconv.Itoa(i) },
		Value: func(_ string, n int) []byte { return []byte(strconv.Itoa(n)) },
		Count: func(v []byte) (int, error) { return strconv.Atoi(string(v)) },
		Other: func(p string, i int) (string, []byte) {
			return p + "bb/" + strconv.Itoa(i), []byte("other")
		},
		ListPrefix: func(p string) string { return p + "b/" },
	}
}

// IPAMShape is the allocator's keys and values under the prefix: blocks
// (IPv4 and IPv6, whose keys and object names sort differently) carrying
// n as their sequence, and pools and node indexes as the other keys.
func IPAMShape() Shape {
	cidr := func(i int) netip.Prefix {
		if i%3 == 2 {
			return netip.MustParsePrefix(fmt.Sprintf("fd00:%x::40/122", i))
		}
		return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 200, byte(i >> 2), byte(i&3) << 6}), 26)
	}
	return Shape{
		Key: func(p string, i int) string { return ipam.Keys{Prefix: p}.Block(cidr(i)) },
		Value: func(key string, n int) []byte {
			p, err := ipam.Keys{}.ParseBlockKey(key)
			if err != nil {
				panic(err)
			}
			b := ipam.NewBlock(p, ipam.HostAffinity("node-"+strconv.Itoa(n%3)))
			b.Sequence = uint64(n)
			return mustJSON(b)
		},
		Count: func(v []byte) (int, error) {
			var b ipam.Block
			err := json.Unmarshal(v, &b)
			return int(b.Sequence), err
		},
		Other: func(p string, i int) (string, []byte) {
			if i%2 == 0 {
				name := "pool-" + strconv.Itoa(i)
				return ipam.Keys{Prefix: p}.Pool(name), mustJSON(ipam.Pool{Name: name, CIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i), 0, 0}), 16)})
			}
			node := "node-" + strconv.Itoa(i)
			return p + "ipam/nodes/" + node, mustJSON(map[string]string{"node": node})
		},
		ListPrefix: func(p string) string { return ipam.Keys{Prefix: p}.Blocks() },
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// RunWrites runs the part of the suite every store passes, on Get, List
// and Write alone, with keys and values of shape: what a store without
// Txn and Watch (the Kubernetes store) can be held to. newStore is
// called once per subtest with the prefix the subtest writes under.
func RunWrites(t *testing.T, newStore func(t *testing.T, prefix string) ipam.Store, shape Shape) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s ipam.Store, p string, sh Shape)
	}{
		{"GetMissing", shapedGetMissing},
		{"CreateUpdateDelete", shapedCreateUpdateDelete},
		{"DeleteWithRevision", shapedDeleteWithRevision},
		{"UpdateMissingIsConflict", shapedUpdateMissing},
		{"List", shapedList},
		{"ConcurrentCAS", shapedConcurrentCAS},
		{"CanceledContext", shapedCanceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := "/storetest/" + t.Name() + "/"
			tt.fn(t, newStore(t, p), p, shape)
		})
	}
}

// mustCount gets key and returns the n its value carries, and its
// revision.
func mustCount(t *testing.T, s ipam.Store, sh Shape, key string) (int, int64) {
	t.Helper()
	kv := mustGet(t, s, key)
	n, err := sh.Count(kv.Value)
	if err != nil || kv.Key != key || kv.ModRevision <= 0 {
		t.Fatalf("Get(%s) = %+v (count %d, %v)", key, kv, n, err)
	}
	return n, kv.ModRevision
}

func shapedGetMissing(t *testing.T, s ipam.Store, p string, sh Shape) {
	if _, err := s.Get(ctxT(t), sh.Key(p, 0)); !errors.Is(err, ipam.ErrNotFound) {
		t.Fatalf("Get missing: err = %v, want ErrNotFound", err)
	}
}

func shapedCreateUpdateDelete(t *testing.T, s ipam.Store, p string, sh Shape) {
	k := sh.Key(p, 0)
	r1 := mustWrite(t, s, ipam.Write{Key: k, Value: sh.Value(k, 1)})
	if n, rev := mustCount(t, s, sh, k); n != 1 || rev != r1 {
		t.Fatalf("after create: %d at %d, want 1 at %d", n, rev, r1)
	}
	if _, err := s.Write(ctxT(t), ipam.Write{Key: k, Value: sh.Value(k, 9)}); !errors.Is(err, ipam.ErrConflict) {
		t.Fatalf("create of an existing key: err = %v, want ErrConflict", err)
	}
	r2 := mustWrite(t, s, ipam.Write{Key: k, ModRevision: r1, Value: sh.Value(k, 2)})
	if r2 == r1 {
		t.Fatalf("update kept revision %d", r1)
	}
	if _, err := s.Write(ctxT(t), ipam.Write{Key: k, ModRevision: r1, Value: sh.Value(k, 9)}); !errors.Is(err, ipam.ErrConflict) {
		t.Fatalf("update at a stale revision: err = %v, want ErrConflict", err)
	}
	r3 := mustWrite(t, s, ipam.Write{Key: k, ModRevision: ipam.AnyRevision, Value: sh.Value(k, 3)})
	if n, rev := mustCount(t, s, sh, k); n != 3 || rev != r3 {
		t.Fatalf("after unconditional put: %d at %d, want 3 at %d", n, rev, r3)
	}
	if rev := mustWrite(t, s, ipam.Write{Key: k, ModRevision: r3, Delete: true}); rev != 0 {
		t.Fatalf("delete returned revision %d, want 0", rev)
	}
	if _, err := s.Get(ctxT(t), k); !errors.Is(err, ipam.ErrNotFound) {
		t.Fatalf("after delete: err = %v, want ErrNotFound", err)
	}
	mustWrite(t, s, ipam.Write{Key: k, ModRevision: ipam.AnyRevision, Delete: true})
	// Unconditional put of a missing key creates it.
	mustWrite(t, s, ipam.Write{Key: k, ModRevision: ipam.AnyRevision, Value: sh.Value(k, 4)})
	if n, _ := mustCount(t, s, sh, k); n != 4 {
		t.Fatalf("after unconditional create: %d, want 4", n)
	}
}

func shapedDeleteWithRevision(t *testing.T, s ipam.Store, p string, sh Shape) {
	k := sh.Key(p, 0)
	r1 := mustWrite(t, s, ipam.Write{Key: k, Value: sh.Value(k, 1)})
	r2 := mustWrite(t, s, ipam.Write{Key: k, ModRevision: r1, Value: sh.Value(k, 2)})
	if _, err := s.Write(ctxT(t), ipam.Write{Key: k, ModRevision: r1, Delete: true}); !errors.Is(err, ipam.ErrConflict) {
		t.Fatalf("delete at a stale revision: err = %v, want ErrConflict", err)
	}
	if n, _ := mustCount(t, s, sh, k); n != 2 {
		t.Fatalf("a refused delete changed the key: %d", n)
	}
	mustWrite(t, s, ipam.Write{Key: k, ModRevision: r2, Delete: true})
}

func shapedUpdateMissing(t *testing.T, s ipam.Store, p string, sh Shape) {
	k := sh.Key(p, 0)
	r1 := mustWrite(t, s, ipam.Write{Key: k, Value: sh.Value(k, 1)})
	mustWrite(t, s, ipam.Write{Key: k, ModRevision: r1, Delete: true})
	if _, err := s.Write(ctxT(t), ipam.Write{Key: k, ModRevision: r1, Value: sh.Value(k, 2)}); !errors.Is(err, ipam.ErrConflict) {
		t.Fatalf("update of a deleted key: err = %v, want ErrConflict", err)
	}
	if _, err := s.Write(ctxT(t), ipam.Write{Key: k, ModRevision: r1, Delete: true}); !errors.Is(err, ipam.ErrConflict) {
		t.Fatalf("conditional delete of a deleted key: err = %v, want ErrConflict", err)
	}
	if _, err := s.Get(ctxT(t), k); !errors.Is(err, ipam.ErrNotFound) {
		t.Fatalf("a refused update created the key: err = %v", err)
	}
}

func shapedList(t *testing.T, s ipam.Store, p string, sh Shape) {
	const n = 7
	var want []string
	for i := range n {
		k := sh.Key(p, i)
		mustWrite(t, s, ipam.Write{Key: k, Value: sh.Value(k, i)})
		want = append(want, k)
	}
	all := slices.Clone(want)
	for i := range 3 {
		k, v := sh.Other(p, i)
		mustWrite(t, s, ipam.Write{Key: k, Value: v})
		all = append(all, k)
	}
	slices.Sort(want)
	slices.Sort(all)
	check := func(prefix string, want []string) {
		t.Helper()
		kvs, err := s.List(ctxT(t), prefix)
		if err != nil {
			t.Fatalf("List(%s): %v", prefix, err)
		}
		var got []string
		for _, kv := range kvs {
			got = append(got, kv.Key)
			if kv.ModRevision <= 0 {
				t.Errorf("List(%s): %s at revision %d", prefix, kv.Key, kv.ModRevision)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("List(%s) = %q, want %q", prefix, got, want)
		}
	}
	check(sh.ListPrefix(p), want)
	check(p, all)
	check(sh.ListPrefix(p)+"zzz", nil)
	for _, kv := range must(s.List(ctxT(t), sh.ListPrefix(p))) {
		if c, err := sh.Count(kv.Value); err != nil || sh.Key(p, c) != kv.Key {
			t.Errorf("List: %s holds %d (%v), written with its index", kv.Key, c, err)
		}
	}
}

func must(kvs []ipam.KV, err error) []ipam.KV {
	if err != nil {
		panic(err)
	}
	return kvs
}

// shapedConcurrentCAS has writers race read-modify-write on one key:
// every increment lands exactly once.
func shapedConcurrentCAS(t *testing.T, s ipam.Store, p string, sh Shape) {
	k := sh.Key(p, 0)
	mustWrite(t, s, ipam.Write{Key: k, Value: sh.Value(k, 0)})
	const writers, each = 4, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for range writers {
		wg.Go(func() {
			for done := 0; done < each; {
				kv, err := s.Get(ctxT(t), k)
				if err != nil {
					errs <- err
					return
				}
				n, err := sh.Count(kv.Value)
				if err != nil {
					errs <- err
					return
				}
				_, err = s.Write(ctxT(t), ipam.Write{Key: k, ModRevision: kv.ModRevision, Value: sh.Value(k, n+1)})
				switch {
				case errors.Is(err, ipam.ErrConflict):
				case err != nil:
					errs <- err
					return
				default:
					done++
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n, _ := mustCount(t, s, sh, k); n != writers*each {
		t.Fatalf("counter = %d, want %d", n, writers*each)
	}
}

func shapedCanceled(t *testing.T, s ipam.Store, p string, sh Shape) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	k := sh.Key(p, 0)
	if _, err := s.Get(ctx, k); !errors.Is(err, ipam.ErrUnavailable) {
		t.Errorf("Get with canceled ctx: err = %v, want ErrUnavailable", err)
	}
	if _, err := s.Write(ctx, ipam.Write{Key: k, Value: sh.Value(k, 1)}); !errors.Is(err, ipam.ErrUnavailable) {
		t.Errorf("Write with canceled ctx: err = %v, want ErrUnavailable", err)
	}
	if _, err := s.List(ctx, sh.ListPrefix(p)); !errors.Is(err, ipam.ErrUnavailable) {
		t.Errorf("List with canceled ctx: err = %v, want ErrUnavailable", err)
	}
}
