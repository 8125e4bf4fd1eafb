package ipam

import (
	"net/netip"
	"strings"
	"testing"
)

func TestPoolNormalize(t *testing.T) {
	tests := []struct {
		pool      Pool
		wantBlock int
		wantErr   string
	}{
		{Pool{Name: "a", CIDR: netip.MustParsePrefix("10.244.0.0/16")}, 26, ""},
		{Pool{Name: "a", CIDR: netip.MustParsePrefix("10.244.1.2/16")}, 26, ""},
		{Pool{Name: "b", CIDR: netip.MustParsePrefix("fd00::/48")}, 122, ""},
		{Pool{Name: "c", CIDR: netip.MustParsePrefix("10.0.0.0/28"), BlockSize: 30}, 30, ""},
		{Pool{Name: "d", CIDR: netip.MustParsePrefix("10.0.0.0/28")}, 0, `pool "d": blockSize 26`},
		{Pool{Name: "e", CIDR: netip.MustParsePrefix("10.0.0.0/8"), BlockSize: 16}, 0, `pool "e": blockSize 16`},
		{Pool{Name: "f"}, 0, `pool "f": cidr`},
		{Pool{Name: "", CIDR: netip.MustParsePrefix("10.0.0.0/8")}, 0, `pool "": invalid name`},
		{Pool{Name: "g", CIDR: netip.MustParsePrefix("10.0.0.0/8"), NodeSelector: "a=b=c"}, 0, `pool "g": nodeSelector "a=b=c"`},
	}
	for _, tt := range tests {
		got, err := tt.pool.Normalize()
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || KindOf(err) != KindInvalid {
				t.Errorf("Normalize(%+v) err = %v, want KindInvalid containing %q", tt.pool, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got.BlockSize != tt.wantBlock || got.CIDR != got.CIDR.Masked() {
			t.Errorf("Normalize(%+v) = %+v, %v", tt.pool, got, err)
		}
	}
}

func TestPoolBlocks(t *testing.T) {
	p, _ := Pool{Name: "p", CIDR: netip.MustParsePrefix("10.0.0.0/16")}.Normalize()
	if p.NumBlocks() != 1024 {
		t.Fatalf("NumBlocks = %d", p.NumBlocks())
	}
	if got := p.BlockAt(1023); got != netip.MustParsePrefix("10.0.255.192/26") {
		t.Fatalf("BlockAt(1023) = %s", got)
	}
	if got := p.BlockFor(netip.MustParseAddr("10.0.3.77")); got != netip.MustParsePrefix("10.0.3.64/26") {
		t.Fatalf("BlockFor = %s", got)
	}
	p6, _ := Pool{Name: "p6", CIDR: netip.MustParsePrefix("fd00::/48")}.Normalize()
	if got := p6.BlockAt(1<<58 + 1); got != netip.MustParsePrefix("fd00:0:0:1::40/122") {
		t.Fatalf("BlockAt(1<<58+1) = %s", got)
	}
}

func TestKeys(t *testing.T) {
	k := Keys{}
	c := netip.MustParsePrefix("fd00::40/122")
	if got := k.Block(c); got != "/podnet/v2/ipam/blocks/fd00::40-122" {
		t.Fatalf("Block key = %q", got)
	}
	if got, err := k.ParseBlockKey(k.Block(c)); err != nil || got != c {
		t.Fatalf("ParseBlockKey = %s, %v", got, err)
	}
	if got := k.Node("node-1"); got != "/podnet/v2/ipam/nodes/node-1" {
		t.Fatalf("Node key = %q", got)
	}
}

func TestSelector(t *testing.T) {
	labels := map[string]string{"zone": "a", "gpu": "true"}
	tests := map[string]bool{
		"": true, "all()": true, "zone=a": true, "zone==a": true, "zone!=a": false,
		"zone=b": false, "gpu": true, "!gpu": false, "zone=a,gpu": true, "zone=a,!gpu": false, "rack!=1": true,
	}
	for s, want := range tests {
		sel, err := ParseSelector(s)
		if err != nil {
			t.Fatalf("ParseSelector(%q): %v", s, err)
		}
		if got := sel.Matches(labels); got != want {
			t.Errorf("%q.Matches = %v, want %v", s, got, want)
		}
	}
}
