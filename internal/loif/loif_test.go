package loif

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

func TestUpDownAddrs(t *testing.T) {
	testutil.RequireRoot(t)
	_, path := testutil.NewNetNS(t)
	err := netns.Do(path, func() error {
		if up, err := IsUp(); err != nil || up {
			t.Errorf("a new namespace's lo: up %v, %v", up, err)
		}
		for range 2 { // the second time changes nothing
			if err := SetUp(true); err != nil {
				return err
			}
			if up, err := IsUp(); err != nil || !up {
				t.Errorf("after SetUp(true): up %v, %v", up, err)
			}
		}
		addrs, err := Addrs()
		if err != nil {
			return err
		}
		if len(addrs) == 0 || addrs[0] != netip.MustParsePrefix("127.0.0.1/8") {
			t.Errorf("addresses %v, want 127.0.0.1/8 first", addrs)
		}
		if !slices.Contains(addrs, netip.MustParsePrefix("::1/128")) {
			t.Logf("no ::1 (IPv6 disabled here?): %v", addrs)
		}
		if err := SetUp(false); err != nil {
			return err
		}
		if up, err := IsUp(); err != nil || up {
			t.Errorf("after SetUp(false): up %v, %v", up, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
