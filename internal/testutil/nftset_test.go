package testutil

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables"
)

func TestSetContents(t *testing.T) {
	ip := func(s string) []byte { return netip.MustParseAddr(s).AsSlice() }
	interval4 := &nftables.Set{Interval: true}
	tests := []struct {
		name  string
		set   *nftables.Set
		elems []nftables.SetElement
		want  string
	}{
		{"addresses", &nftables.Set{}, []nftables.SetElement{{Key: ip("10.244.0.5")}, {Key: ip("10.244.0.4")}}, "10.244.0.4 10.244.0.5"},
		{"prefixes, listed backwards", interval4, []nftables.SetElement{
			{Key: ip("240.0.0.0"), IntervalEnd: true}, {Key: ip("224.0.0.0")},
			{Key: ip("10.245.0.0"), IntervalEnd: true}, {Key: ip("10.244.0.0")},
		}, "10.244.0.0/16 224.0.0.0/4"},
		{"a pod's /32", interval4, []nftables.SetElement{{Key: ip("10.244.0.7")}, {Key: ip("10.244.0.8"), IntervalEnd: true}}, "10.244.0.7/32"},
		{"to the top", &nftables.Set{Interval: true}, []nftables.SetElement{{Key: ip("ff00::")}}, "ff00::/8"},
		{"adjacent", interval4, []nftables.SetElement{
			{Key: ip("10.0.0.0")}, {Key: ip("10.0.0.1"), IntervalEnd: true},
			{Key: ip("10.0.0.1")}, {Key: ip("10.0.0.4"), IntervalEnd: true},
		}, "10.0.0.0/32 10.0.0.1-10.0.0.4"},
		{"dangling end", interval4, []nftables.SetElement{{Key: ip("10.0.0.9"), IntervalEnd: true}}, "end 10.0.0.9 without a start"},
	}
	for _, tt := range tests {
		if got := strings.Join(slices.Sorted(slices.Values(SetContents(tt.set, tt.elems))), " "); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}
