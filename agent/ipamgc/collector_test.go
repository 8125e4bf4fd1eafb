package ipamgc

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/bolt"
)

// cacheAttachment writes a CNI cache entry as a runtime does after ADD.
func cacheAttachment(t *testing.T, dir, network, containerID string) {
	t.Helper()
	e := map[string]any{"kind": "cniCacheV1", "containerId": containerID, "networkName": network, "ifName": "eth0",
		"config": []byte(`{"cniVersion":"1.1.0","name":"` + network + `","plugins":[{"type":"podnet"}]}`)}
	b, _ := json.Marshal(e)
	p := filepath.Join(dir, "results", network+"-"+containerID+"-eth0")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestGC(t *testing.T) {
	ctx := context.Background()
	s, err := bolt.Open(ctx, bolt.Options{Path: filepath.Join(t.TempDir(), "ipam.db"), HoldOpen: true, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	alloc := ipam.New(s, ipam.Config{})
	if err := alloc.PutPool(ctx, ipam.Pool{Name: "default", CIDR: pfx(testPool)}); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	noCache := &collector{alloc: alloc, node: "self", cacheDir: cache, grace: 0, now: time.Now, suspects: map[string]time.Time{}}
	for _, a := range []struct{ handle, node string }{
		{"net.live", "self"},  // cached: kept
		{"net.gone", "self"},  // not cached: released after the grace period
		{"net.other", "peer"}, // another node's: never this node's to collect
	} {
		if _, err := alloc.AutoAssign(ctx, ipam.AutoAssignArgs{Handle: a.handle, Node: a.node, Num4: 2}); err != nil {
			t.Fatal(err)
		}
	}
	// No results directory (the host's cache not mounted): nothing is
	// collected, however long.
	for range 2 {
		if n, err := noCache.pass(ctx); err == nil || n != 0 {
			t.Fatalf("GC without a cache directory: released %d, err %v", n, err)
		}
	}
	cacheAttachment(t, cache, "net", "live")
	now := time.Unix(1000, 0)
	c := &collector{alloc: alloc, node: "self", cacheDir: cache, grace: time.Minute, now: func() time.Time { return now },
		suspects: map[string]time.Time{}}
	held := func(h string) int {
		node := "self"
		if h == "net.other" {
			node = "peer"
		}
		ips, err := alloc.IPsByHandle(ctx, node, h)
		if err != nil {
			t.Fatal(err)
		}
		return len(ips)
	}
	for _, step := range []struct {
		after    time.Duration
		released int
		gone     int // addresses net.gone still holds
	}{
		{0, 0, 2},                // first sighting: a suspect only
		{30 * time.Second, 0, 2}, // within the grace period
		{31 * time.Second, 2, 0}, // a minute after the first sighting
		{time.Minute, 0, 0},      // nothing left
	} {
		now = now.Add(step.after)
		n, err := c.pass(ctx)
		if err != nil || n != step.released {
			t.Fatalf("at +%v: released %d (%v), want %d", step.after, n, err, step.released)
		}
		if got := held("net.gone"); got != step.gone {
			t.Fatalf("at +%v: net.gone holds %d, want %d", step.after, got, step.gone)
		}
	}
	if held("net.live") != 2 || held("net.other") != 2 {
		t.Fatalf("live or other node's addresses released: %d, %d", held("net.live"), held("net.other"))
	}
	// A suspect that gets its cache entry in time is forgotten.
	if _, err := alloc.AutoAssign(ctx, ipam.AutoAssignArgs{Handle: "net.late", Node: "self", Num4: 1}); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.pass(ctx); n != 0 {
		t.Fatal("released a new handle on first sight")
	}
	cacheAttachment(t, cache, "net", "late")
	now = now.Add(2 * time.Minute)
	if n, err := c.pass(ctx); n != 0 || err != nil || held("net.late") != 1 {
		t.Fatalf("released a handle that became cached: %d, %v", n, err)
	}
}

const testPool = "10.103.0.0/16"

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
