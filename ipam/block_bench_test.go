package ipam

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"testing"
)

// BenchmarkBlockJSON decodes and encodes a block of 60 allocations, as
// every allocation and release in the block does: with the attributes
// ipamcni records (the endpoint ID alone) and with every descriptive
// attribute repeated per allocation, as it recorded before.
func BenchmarkBlockJSON(b *testing.B) {
	for _, full := range []bool{false, true} {
		name := "endpoint-only"
		if full {
			name = "all-attributes"
		}
		b.Run(name, func(b *testing.B) {
			blk := NewBlock(netip.MustParsePrefix("10.244.13.128/26"), HostAffinity("node-1"))
			for i := range 60 {
				extra := map[string]string{AttrEndpoint: fmt.Sprintf("node-1/default/pod-%d/eth0", i)}
				if full {
					extra["containerID"] = fmt.Sprintf("0123456789abcdef-%d", i)
					extra["node"] = "node-1"
					extra["network"] = "podnet"
					extra["namespace"] = "default"
					extra["pod"] = fmt.Sprintf("pod-%d", i)
				}
				blk.AutoAllocate(1, Attributes{Handle: fmt.Sprintf("podnet.0123456789abcdef-%d", i), Node: "node-1", Extra: extra}, nil)
			}
			data, err := json.Marshal(blk)
			if err != nil {
				b.Fatal(err)
			}
			b.Run("encoding-json", func(b *testing.B) {
				b.ReportMetric(float64(len(data)), "bytes")
				for b.Loop() {
					var x Block
					if err := json.Unmarshal(data, &x); err != nil {
						b.Fatal(err)
					}
					if _, err := json.Marshal(&x); err != nil {
						b.Fatal(err)
					}
				}
			})
			// What the allocator runs (blockjson.go), Validate included.
			b.Run("hand", func(b *testing.B) {
				for b.Loop() {
					x, err := decodeBlock(KV{Key: "k", Value: data})
					if err != nil {
						b.Fatal(err)
					}
					if _, err := encodeBlock(x); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
