package ipamgc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/bolt"
)

// TestServiceLetsEmptyBlocksGo: a node that held many blocks and now
// holds few gives the empty ones back to the pool on its GC passes,
// keeping one spare, and never one in use.
func TestServiceLetsEmptyBlocksGo(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	s, err := bolt.Open(ctx, bolt.Options{Path: filepath.Join(t.TempDir(), "ipam.db"), HoldOpen: true, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	alloc := ipam.New(s, ipam.Config{})
	if err := alloc.PutPool(ctx, ipam.Pool{Name: "default", CIDR: pfx(testPool), BlockSize: 28}); err != nil {
		t.Fatal(err)
	}
	// 64 pods in /28 blocks (16 addresses each): at least four blocks.
	for i := range 64 {
		if _, err := alloc.AutoAssign(ctx, ipam.AutoAssignArgs{Handle: fmt.Sprintf("net.c%d", i), Node: "self", Num4: 1}); err != nil {
			t.Fatal(err)
		}
	}
	blocks := func() (all, inUse int) {
		infos, err := alloc.Blocks(ipam.FreshRead(ctx))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range infos {
			if b.Node == "self" {
				all++
				if b.Allocated > 0 {
					inUse++
				}
			}
		}
		return all, inUse
	}
	before, _ := blocks()
	// Scale down to the first 3 pods.
	for i := 3; i < 64; i++ {
		if err := alloc.ReleaseByHandle(ctx, "self", fmt.Sprintf("net.c%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	cache := t.TempDir()
	for i := range 3 {
		cacheAttachment(t, cache, "net", fmt.Sprintf("c%d", i))
	}
	reg := prometheus.NewRegistry()
	svc := New(Config{Node: "self", Store: s, Interval: 20 * time.Millisecond, Grace: time.Hour, BlockGrace: time.Millisecond,
		CacheDir: cache, ReleaseDir: t.TempDir(), Metrics: NewMetrics(reg), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		all, inUse := blocks()
		if all-inUse <= 1 && inUse >= 1 {
			t.Logf("blocks of the node: %d at 64 pods, %d at 3 (%d in use); %v let go", before, all, inUse, testutil.ToFloat64(svc.releasedBlocks))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s of GC passes the node holds %d blocks, %d of them in use (had %d); want at most one spare", all, inUse, before)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if before < 4 {
		t.Fatalf("64 pods took only %d blocks of /28", before)
	}
	for i := range 3 {
		if ips, err := alloc.IPsByHandle(ctx, "self", fmt.Sprintf("net.c%d", i)); err != nil || len(ips) != 1 {
			t.Fatalf("pod c%d's address after GC: %v, %v", i, ips, err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
