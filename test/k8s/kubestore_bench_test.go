package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/kube"
)

// BenchmarkKubeStoreOpen measures what a plugin exec pays to reach the
// Kubernetes store (docs/design/kubernetes-ipam.md 4.4 item 1), in
// process: open (read and parse the kubeconfig, its CA and client
// certificate), the TCP connect and TLS handshake, and one GET of a pool;
// then Close. Beside it: the open alone, the GET alone on a kept
// connection, and the
// harness's dial from the control plane's network namespace (a setns
// round trip on a fresh thread that a plugin does not pay), to subtract.
//
//	cd test/k8s && CI=true go test -run XXX -bench BenchmarkKubeStoreOpen -timeout 30m .
func BenchmarkKubeStoreOpen(b *testing.B) {
	c, kc := kubeStoreCluster(b)
	ctx := context.Background()
	key := ipam.Keys{}.Pool("bench")
	setup := openKubeStore(b, c, kc, "")
	if _, err := setup.Write(ctx, ipam.Write{Key: key, ModRevision: ipam.AnyRevision,
		Value: []byte(`{"name":"bench","cidr":"10.252.0.0/16"}`)}); err != nil {
		b.Fatal(err)
	}
	b.Run("open+TLS+GET", func(b *testing.B) {
		for b.Loop() {
			s, err := kube.Open(kube.Options{Kubeconfig: kc, Dial: c.Nodes[0].DialContext})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.Get(ctx, key); err != nil {
				b.Fatal(err)
			}
			s.Close()
		}
	})
	b.Run("open-only", func(b *testing.B) {
		for b.Loop() {
			s, err := kube.Open(kube.Options{Kubeconfig: kc, Dial: c.Nodes[0].DialContext})
			if err != nil {
				b.Fatal(err)
			}
			s.Close()
		}
	})
	b.Run("GET-kept-connection", func(b *testing.B) {
		for b.Loop() {
			if _, err := setup.Get(ctx, key); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("harness-dial", func(b *testing.B) {
		for b.Loop() {
			conn, err := c.Nodes[0].DialContext(ctx, "tcp", "198.18.0.1:6443")
			if err != nil {
				b.Fatal(err)
			}
			conn.Close()
		}
	})
}

// fullBlock is a /26 with its 64 addresses allocated, each to its own
// pod, with attributes of real size (handle <network>.<64 hex>, node,
// endpoint, created): the block a steady-state ADD rewrites.
func fullBlock(cidr netip.Prefix, node string) *ipam.Block {
	b := ipam.NewBlock(cidr, ipam.HostAffinity(node))
	for i := range b.Owners {
		b.Owners[i] = i + 1
		b.Attributes = append(b.Attributes, ipam.Attributes{
			Handle: fmt.Sprintf("podnet.%064x", i), Node: node,
			Extra: map[string]string{
				"endpoint": fmt.Sprintf("%s/default/pod-%d-%s/eth0", node, i, strings.Repeat("x", 20)),
				"created":  time.Now().Format(time.RFC3339Nano),
			},
		})
	}
	b.Free = b.Free[:0]
	b.Sequence = uint64(len(b.Owners))
	return b
}

// BenchmarkKubeStoreWrite measures one Write of a full 64-address block
// (a PUT with its resourceVersion, ~20 KB of JSON), what each ADD and DEL
// costs in steady state, one at a time on a kept connection. It reports
// the p50 and p99 latency besides ns/op; run ~200 writes:
//
//	cd test/k8s && CI=true go test -run XXX -bench BenchmarkKubeStoreWrite -benchtime 200x -timeout 30m .
func BenchmarkKubeStoreWrite(b *testing.B) {
	c, kc := kubeStoreCluster(b)
	b.Run("block64", func(b *testing.B) {
		ctx := context.Background()
		s := openKubeStore(b, c, kc, "")
		cidr := netip.MustParsePrefix("10.253.0.0/26")
		key := ipam.Keys{}.Block(cidr)
		blk := fullBlock(cidr, "node-1")
		value, _ := json.Marshal(blk)
		b.Logf("block value: %d bytes", len(value))
		rev, err := s.Write(ctx, ipam.Write{Key: key, ModRevision: ipam.AnyRevision, Value: value})
		if err != nil {
			b.Fatal(err)
		}
		var lat []time.Duration
		for i := 0; b.Loop(); i++ {
			blk.Sequence++ // a change, as an allocation makes
			value, _ := json.Marshal(blk)
			start := time.Now()
			if rev, err = s.Write(ctx, ipam.Write{Key: key, ModRevision: rev, Value: value}); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50_ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99_ms")
	})
}
