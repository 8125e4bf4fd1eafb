package nodeclean

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/agent/route"
	"github.com/podnet/podnet/dataplane"
)

// names lists dir.
func names(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// checkClean asserts that nothing of podnet is left on n and that every
// foreign thing is as foreign made it.
func checkClean(t *testing.T, n *node, hostVeth string) {
	t.Helper()
	if got := names(t, n.paths.ConfDir); !slices.Equal(got, []string{"10-other.conflist"}) {
		t.Errorf("conf dir holds %v, want only the other CNI's config", got)
	}
	if got := names(t, n.paths.BinDir); !slices.Equal(got, []string{"bridge"}) {
		t.Errorf("bin dir holds %v, want only the other CNI's plugin", got)
	}
	for _, d := range []string{n.paths.StateDir, n.paths.RunDir} {
		if got := names(t, d); len(got) != 0 {
			t.Errorf("%s holds %v", d, got)
		}
	}
	n.do(t, func() error {
		checkNet(t, hostVeth)
		checkTables(t)
		for key, want := range map[string]string{"net/ipv4/ip_forward": "0", "net/ipv4/conf/all/rp_filter": "2"} {
			if got, err := dataplane.ReadSysctl(key); err != nil || got != want {
				t.Errorf("sysctl %s = %q (%v), want %s", key, got, err, want)
			}
		}
		return nil
	})
}

func checkNet(t *testing.T, hostVeth string) {
	h, err := dataplane.NewHandle()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := h.LinkByName(route.VXLANDevice); !dataplane.IsNotFound(err) {
		t.Errorf("%s left (%v)", route.VXLANDevice, err)
	}
	if _, err := h.LinkByName(hostVeth); err != nil {
		t.Errorf("the pod's host veth %s went: %v", hostVeth, err)
	}
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := h.RouteListFiltered(family, &netlink.Route{Protocol: route.RouteProtocol}, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			t.Errorf("route of protocol 97 left: %v", r)
		}
	}
	rs, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: dataplane.IPNet(foreignRt)}, netlink.RT_FILTER_DST)
	if err != nil || len(rs) != 1 || rs[0].Protocol != unix.RTPROT_STATIC {
		t.Errorf("the static route to %s: %v %v", foreignRt, rs, err)
	}
}

func checkTables(t *testing.T) {
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	ts, err := c.ListTablesOfFamily(nftables.TableFamilyUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tb := range ts {
		got = append(got, familyNames[tb.Family]+" "+tb.Name)
	}
	if !slices.Equal(got, []string{"inet other"}) {
		t.Errorf("nftables tables %v, want only inet other", got)
	}
}

// A loopback plugin podnet did not build is not podnet's, nor is a
// config without podnet's plugin (no root: files only).
func TestSurveyFilesForeign(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{"loopback": "#!/bin/sh\n", "podnet-ipam": "x", "host-local": "x"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fs, err := surveyPlugins(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"loopback": false, "podnet-ipam": true}
	if len(fs) != len(want) {
		t.Fatalf("listed %+v", fs)
	}
	for _, f := range fs {
		if w, ok := want[filepath.Base(f.Path)]; !ok || w != f.Podnet {
			t.Errorf("%+v", f)
		}
	}
	if fs, err := surveyPlugins(filepath.Join(dir, "missing")); err != nil || fs != nil {
		t.Errorf("missing dir: %v %v", fs, err)
	}
}
