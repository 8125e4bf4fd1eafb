package bolt

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/ipamtest"
)

func benchStore(b *testing.B, hold bool) *Store { return benchStoreSync(b, hold, false) }

func benchStoreSync(b *testing.B, hold, noSync bool) *Store {
	s, err := Open(context.Background(), Options{Path: filepath.Join(b.TempDir(), "ipam.db"), HoldOpen: hold, NoSync: noSync})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// With fsync (NoSync false): what a real node gets.
func BenchmarkAutoAssignHoldOpen(b *testing.B) {
	for _, workers := range []int{1, 8, 32} {
		b.Run(fmt.Sprint("workers=", workers), func(b *testing.B) { ipamtest.BenchAutoAssign(b, benchStore(b, true), 100, workers) })
	}
	// Without fsync: the allocator's own cost, which fsync hides.
	b.Run("nosync/workers=1", func(b *testing.B) { ipamtest.BenchAutoAssign(b, benchStoreSync(b, true, true), 100, 1) })
}

func BenchmarkAutoAssignPerOperation(b *testing.B) {
	ipamtest.BenchAutoAssign(b, benchStore(b, false), 100, 1)
}

func BenchmarkClaim(b *testing.B) {
	for _, n := range []int{100, 10000} {
		b.Run(fmt.Sprint("existing=", n), func(b *testing.B) { ipamtest.BenchClaim(b, benchStore(b, true), n) })
	}
}

// BenchmarkGetAckApplied: a read in the mode the podnet plugin's ADD
// uses, with no commit under way (the reads an allocation makes before
// its write).
func BenchmarkGetAckApplied(b *testing.B) {
	s, err := Open(context.Background(), Options{Path: filepath.Join(b.TempDir(), "db"), HoldOpen: true, AckApplied: true, NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if _, err := s.Write(ctx, ipam.Write{Key: "k", ModRevision: ipam.AnyRevision, Value: []byte("v")}); err != nil {
		b.Fatal(err)
	}
	if err := s.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.Get(ctx, "k"); err != nil {
			b.Fatal(err)
		}
	}
}
