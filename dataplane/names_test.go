package dataplane

import (
	"net/netip"
	"testing"

	"github.com/google/nftables"
)

func TestHostVethName(t *testing.T) {
	a := HostVethName("ctr1", "eth0")
	if len(a) != 15 || a[:2] != "pn" || !IsHostVethName(a) {
		t.Fatalf("name %q", a)
	}
	if a != HostVethName("ctr1", "eth0") {
		t.Fatal("not deterministic")
	}
	for _, other := range []string{HostVethName("ctr1", "eth1"), HostVethName("ctr2", "eth0"), HostVethName("ctr1e", "th0")} {
		if other == a {
			t.Fatalf("%q collides", other)
		}
	}
	for _, bad := range []string{"pn", "eth0", "pn0123456789abz", "xx0123456789abc", "pn0123456789abcd"} {
		if IsHostVethName(bad) {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestAttachmentMACs(t *testing.T) {
	h, c := AttachmentMACs("ctr1", "eth0")
	for _, m := range [][]byte{h, c} {
		if m[0]&1 != 0 || m[0]&2 == 0 {
			t.Errorf("%x is not unicast and locally administered", m)
		}
	}
	if h.String() == c.String() {
		t.Fatal("host and container MAC are equal")
	}
}

func TestRoutedGateway6(t *testing.T) {
	if got := RoutedGateway6.String(); got != "fe80::ecee:eeff:feee:eeee" {
		t.Fatalf("got %s", got)
	}
}

func TestIntervals(t *testing.T) {
	tests := []struct {
		p     string
		first string
		end   string // "" = open to the top
	}{
		{"10.100.0.7/24", "10.100.0.0", "10.100.1.0"},
		{"224.0.0.0/4", "224.0.0.0", "240.0.0.0"},
		{"255.255.255.0/24", "255.255.255.0", ""},
		{"ff00::/8", "ff00::", ""},
		{"fd00:100::/64", "fd00:100::", "fd00:100:0:1::"},
	}
	for _, tt := range tests {
		els := intervalElements(netip.MustParsePrefix(tt.p))
		first, _ := netip.AddrFromSlice(els[0].Key)
		if first.String() != tt.first || els[0].IntervalEnd {
			t.Errorf("%s: first %v", tt.p, els[0])
		}
		if tt.end == "" {
			if len(els) != 1 {
				t.Errorf("%s: %d elements, want 1", tt.p, len(els))
			}
			continue
		}
		end, _ := netip.AddrFromSlice(els[1].Key)
		if end.String() != tt.end || !els[1].IntervalEnd {
			t.Errorf("%s: end %v", tt.p, els[1])
		}
	}
}

func TestIntervalsCover(t *testing.T) {
	var elems []nftables.SetElement
	for _, p := range []string{"10.0.0.0/16", "224.0.0.0/4", "192.168.0.0/24"} {
		elems = append(elems, intervalElements(netip.MustParsePrefix(p))...)
	}
	for p, want := range map[string]bool{
		"10.0.0.0/16":      true,
		"10.0.5.0/24":      true,
		"10.0.0.0/15":      false,
		"192.168.0.0/23":   false,
		"192.168.0.128/25": true,
		"172.16.0.0/12":    false,
		"239.1.0.0/16":     true,
	} {
		if got := intervalsCover(elems, netip.MustParsePrefix(p)); got != want {
			t.Errorf("%s: covered %v, want %v", p, got, want)
		}
	}
}

func TestRuleTag(t *testing.T) {
	a := ruleTag("ipv4", MasqNetwork{Exclude: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}})
	b := ruleTag("ipv4", MasqNetwork{Exclude: []netip.Prefix{netip.MustParsePrefix("fd00::/8"), netip.MustParsePrefix("10.1.0.0/8")}})
	if string(a) != string(b) {
		t.Fatalf("order or host bits change the tag: %s %s", a, b)
	}
	if string(a) == string(ruleTag("ipv4", MasqNetwork{})) || string(a) == string(ruleTag("ipv6", MasqNetwork{Exclude: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}})) {
		t.Fatal("tag does not depend on the exclusions and the family")
	}
	// Subnets added as pods come do not make the rules stale pod by pod.
	added := MasqNetwork{ExcludeAdded: true, Exclude: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24")}}
	if string(ruleTag("ipv4", added)) != string(ruleTag("ipv4", MasqNetwork{ExcludeAdded: true})) {
		t.Fatal("added subnets change the tag")
	}
}

func TestSysctlLists(t *testing.T) {
	l := RoutedHostSysctls("pnabc", true, false)
	if len(l) != 4 || l[0].Key != "net/ipv4/conf/pnabc/proxy_arp" {
		t.Fatalf("%v", l)
	}
	if l := RoutedHostSysctls("pnabc", false, true); l[0].Key != "net/ipv6/conf/pnabc/accept_dad" {
		t.Fatalf("accept_dad must come first: %v", l)
	}
	if ContainerSysctls("eth0", false) != nil {
		t.Fatal("v4-only container needs no sysctl")
	}
}
