package agentsock

import (
	"bufio"
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podnet/podnet/internal/wire"
	"github.com/podnet/podnet/ipam"
)

// TestCacheRaces: answers of backend calls that overlapped a change to
// their key are not kept, whichever order they come back in.
func TestCacheRaces(t *testing.T) {
	kv := func(v string, rev int64) ipam.KV { return ipam.KV{Key: "/k", Value: []byte(v), ModRevision: rev} }
	tests := []struct {
		name string
		run  func(c *cache)
		want *ipam.KV
	}{
		{"fill", func(c *cache) { c.fill(kv("a", 1), c.begin()) }, &ipam.KV{Key: "/k", Value: []byte("a"), ModRevision: 1}},
		{"read overtaken by a write", func(c *cache) {
			read := c.begin()
			c.wrote(ipam.Write{Key: "/k", Value: []byte("b")}, 2, c.begin())
			c.fill(kv("a", 1), read) // the read saw the older value
		}, &ipam.KV{Key: "/k", Value: []byte("b"), ModRevision: 2}},
		{"read overtaken by an eviction", func(c *cache) {
			read := c.begin()
			c.evict("/k")
			c.fill(kv("a", 1), read)
		}, nil},
		{"writes answering out of order", func(c *cache) {
			c.fill(kv("a", 1), c.begin())
			w1, w2 := c.begin(), c.begin()
			c.wrote(ipam.Write{Key: "/k", ModRevision: ipam.AnyRevision, Value: []byte("c")}, 3, w2)
			c.wrote(ipam.Write{Key: "/k", ModRevision: 1, Value: []byte("b")}, 2, w1)
		}, nil},
		{"update", func(c *cache) {
			c.fill(kv("a", 5), c.begin())
			c.wrote(ipam.Write{Key: "/k", ModRevision: 5, Value: []byte("b")}, 6, c.begin())
		}, &ipam.KV{Key: "/k", Value: []byte("b"), ModRevision: 6}},
		{"unconditional write of an uncached key", func(c *cache) {
			c.wrote(ipam.Write{Key: "/k", ModRevision: ipam.AnyRevision, Value: []byte("b")}, 6, c.begin())
		}, &ipam.KV{Key: "/k", Value: []byte("b"), ModRevision: 6}},
		{"delete", func(c *cache) {
			c.fill(kv("a", 5), c.begin())
			c.wrote(ipam.Write{Key: "/k", ModRevision: 5, Delete: true}, 0, c.begin())
		}, nil},
		{"read across a purge", func(c *cache) {
			read := c.begin()
			for _, k := range []string{"/x", "/y", "/z"} { // fills the cache of 2: a purge
				c.fill(ipam.KV{Key: k, ModRevision: 1}, c.begin())
			}
			c.fill(kv("a", 1), read)
		}, nil},
		{"read after a purge", func(c *cache) {
			for _, k := range []string{"/x", "/y", "/z"} {
				c.fill(ipam.KV{Key: k, ModRevision: 1}, c.begin())
			}
			c.fill(kv("a", 1), c.begin())
		}, &ipam.KV{Key: "/k", Value: []byte("a"), ModRevision: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCache(2)
			tt.run(c)
			got, ok := c.get("/k")
			switch {
			case tt.want == nil && ok:
				t.Fatalf("cached %+v, want nothing", got)
			case tt.want != nil && (!ok || string(got.Value) != string(tt.want.Value) || got.ModRevision != tt.want.ModRevision):
				t.Fatalf("cached %+v (%v), want %+v", got, ok, *tt.want)
			}
			if len(c.m) > c.max {
				t.Fatalf("%d entries, over the bound %d", len(c.m), c.max)
			}
		})
	}
}

// TestWireRoundTrip: a request survives encoding; truncated and
// overlong frames are refused.
func TestWireRoundTrip(t *testing.T) {
	r := request{op: opWrite, flags: flagDelete | flagFresh, deadline: 1234567890123, modRev: -1, key: "/podnet/v1/ipam/blocks/10.0.0.0-26", value: []byte(`{"cidr":"10.0.0.0/26"}`)}
	frame := encodeRequest(nil, r)
	got, err := decodeRequest(frame[4:])
	if err != nil || got.op != r.op || got.flags != r.flags || got.deadline != r.deadline || got.modRev != r.modRev || got.key != r.key || string(got.value) != string(r.value) {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, r)
	}
	for n := range len(frame) - 4 {
		if _, err := decodeRequest(frame[4 : 4+n]); err == nil {
			t.Fatalf("a request truncated to %d bytes decoded", n)
		}
	}
	if _, err := decodeRequest(append(frame[4:], 0)); err == nil {
		t.Fatal("a request with a trailing byte decoded")
	}
}

// TestOtherVersionRefused: a request of another protocol version is
// answered with ErrUnsupported and a message naming both versions.
func TestOtherVersionRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, l, nil, Options{}) }()
	defer func() { cancel(); <-done }()
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	frame := encodeRequest(nil, request{op: opGet, key: "/k"})
	frame[4] = version + 1
	if _, err := conn.Write(frame); err != nil {
		t.Fatal(err)
	}
	answer, err := wire.ReadFrame(bufio.NewReader(conn), nil, maxAnswer)
	if err != nil {
		t.Fatal(err)
	}
	c := &Client{path: path}
	err = c.decode(request{op: opGet, key: "/k"}, answer, func(*wire.Dec) {})
	if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "protocol version 2, this agent speaks 1") {
		t.Fatalf("answer to a version 2 request: %v", err)
	}
}
