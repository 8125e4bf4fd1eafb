package dataplane

import (
	"net"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func TestDefaultRoute(t *testing.T) {
	_, def4, _ := net.ParseCIDR("0.0.0.0/0")
	_, def6, _ := net.ParseCIDR("::/0")
	_, sub, _ := net.ParseCIDR("198.18.0.0/24")
	tests := []struct {
		name   string
		routes []netlink.Route
		want   []int // links; nil: no default route
		prio   int
	}{
		{"none", nil, nil, 0},
		{"subnet only", []netlink.Route{{Dst: sub, LinkIndex: 2}}, nil, 0},
		{"nil dst", []netlink.Route{{Dst: sub, LinkIndex: 2}, {LinkIndex: 3}}, []int{3}, 0},
		{"/0 dst, IPv6", []netlink.Route{{Dst: def6, LinkIndex: 4, Type: unix.RTN_UNICAST}}, []int{4}, 0},
		{"lowest metric wins", []netlink.Route{{Dst: def4, LinkIndex: 2, Priority: 600}, {Dst: def4, LinkIndex: 3, Priority: 100}}, []int{3}, 100},
		{"first of equals", []netlink.Route{{Dst: def4, LinkIndex: 2, Priority: 100}, {Dst: def4, LinkIndex: 3, Priority: 100}}, []int{2}, 100},
		{"blackhole skipped", []netlink.Route{{Dst: def4, Type: unix.RTN_BLACKHOLE}, {Dst: def4, LinkIndex: 5, Priority: 900}}, []int{5}, 900},
		{"unreachable skipped", []netlink.Route{{Dst: def4, LinkIndex: 1, Type: unix.RTN_UNREACHABLE}}, nil, 0},
		{"multipath", []netlink.Route{{Dst: def4, MultiPath: []*netlink.NexthopInfo{{LinkIndex: 6}, {LinkIndex: 7}}}}, []int{6, 7}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, links, ok := DefaultRoute(tt.routes)
			if ok != (tt.want != nil) || !slices.Equal(links, tt.want) || ok && r.Priority != tt.prio {
				t.Fatalf("DefaultRoute: %v, links %v, ok %v; want links %v, metric %d", r, links, ok, tt.want, tt.prio)
			}
		})
	}
}

func TestPathMTU(t *testing.T) {
	tests := []struct {
		name    string
		r       netlink.Route
		links   []int
		linkMTU map[int]int
		want    int
	}{
		{"link", netlink.Route{}, []int{2}, map[int]int{2: 1500}, 1500},
		{"jumbo link", netlink.Route{}, []int{2}, map[int]int{2: 9000}, 9000},
		{"route mtu below the link's", netlink.Route{MTU: 1400}, []int{2}, map[int]int{2: 9000}, 1400},
		{"route mtu above the link's", netlink.Route{MTU: 9000}, []int{2}, map[int]int{2: 1500}, 1500},
		{"multipath: the smallest hop", netlink.Route{}, []int{2, 3}, map[int]int{2: 9000, 3: 1500}, 1500},
		{"unknown link", netlink.Route{}, []int{9}, map[int]int{}, 0},
		{"unknown link, route mtu", netlink.Route{MTU: 1280}, []int{9}, map[int]int{}, 1280},
	}
	for _, tt := range tests {
		if got := pathMTU(tt.r, tt.links, tt.linkMTU); got != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.want)
		}
	}
}
