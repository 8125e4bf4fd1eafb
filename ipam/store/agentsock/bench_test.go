package agentsock_test

import (
	"context"
	"testing"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/agentsock"
)

// BenchmarkRoundTrip: one call over the socket on a kept connection,
// answered from the cache (Get) or by a bbolt backend without fsync
// (Write): the transport's own cost.
//
//	go test -run XXX -bench RoundTrip ./ipam/store/agentsock
func BenchmarkRoundTrip(b *testing.B) {
	ctx := context.Background()
	s := serve(b, boltStore(b), agentsock.Options{})
	c := client(b, s.path)
	value := make([]byte, 20<<10) // a full /26 block's JSON is ~20 KB
	rev, err := c.Write(ctx, ipam.Write{Key: "/blk", Value: value})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("Get-cached-20KB", func(b *testing.B) {
		for b.Loop() {
			if _, err := c.Get(ctx, "/blk"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Write-20KB", func(b *testing.B) {
		for b.Loop() {
			if rev, err = c.Write(ctx, ipam.Write{Key: "/blk", ModRevision: rev, Value: value}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("open+Get+Close", func(b *testing.B) {
		for b.Loop() {
			c, err := agentsock.Open(s.path, agentsock.ClientOptions{})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.Get(ctx, "/blk"); err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
	})
}
