package netpol

import (
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/podnet/podnet/dataplane"
	itestutil "github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

// The cached addresses follow the namespace's global addresses; a
// link-local one is not the node's to send from to its pods.
func TestAddrCacheFollowsChanges(t *testing.T) {
	itestutil.RequireRoot(t)
	_, path := itestutil.NewNodeNetNS(t)
	var (
		h *netlink.Handle
		c *addrCache
	)
	err := netns.Do(path, func() (err error) {
		if h, err = dataplane.NewHandle(); err != nil {
			return err
		}
		c, err = newAddrCache(h)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.close(); h.Close() })
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "ul1"}, PeerName: "ul1p"}); err != nil {
		t.Fatal(err)
	}
	link, err := h.LinkByName("ul1")
	if err != nil {
		t.Fatal(err)
	}
	addr := func(s string, scope int) *netlink.Addr {
		ip, n, _ := net.ParseCIDR(s)
		n.IP = ip
		return &netlink.Addr{IPNet: n, Scope: scope}
	}
	a1 := netip.MustParseAddr("198.18.5.1")
	wantEventually := func(want []netip.Addr) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			got, err := c.get()
			if err != nil {
				t.Fatal(err)
			}
			if slices.Equal(got, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("cached addresses %v, want %v", got, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	wantEventually(nil)
	if err := h.AddrAdd(link, addr("198.18.5.1/24", 0)); err != nil {
		t.Fatal(err)
	}
	wantEventually([]netip.Addr{a1})
	if err := h.AddrAdd(link, addr("169.254.9.1/16", 253)); err != nil { // RT_SCOPE_LINK
		t.Fatal(err)
	}
	wantEventually([]netip.Addr{a1})
	if err := h.AddrDel(link, addr("198.18.5.1/24", 0)); err != nil {
		t.Fatal(err)
	}
	wantEventually(nil)
}
