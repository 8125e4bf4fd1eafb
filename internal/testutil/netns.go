package testutil

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/podnet/podnet/netns"
)

// NetNSPrefix starts the name of every namespace NewNetNS creates, so a
// leftover one (a test binary killed mid-run) is easy to recognise.
const NetNSPrefix = "pntest-"

// NewNetNS creates a named network namespace for t and removes it when t
// ends, whether or not t failed. It needs root; call RequireRoot first.
func NewNetNS(t testing.TB) (name, path string) {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("random netns name: %v", err)
	}
	name = NetNSPrefix + hex.EncodeToString(b[:])
	path, err := netns.NewNamed(name)
	if err != nil {
		t.Fatalf("create netns %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("remove netns %s: %v", name, err)
		}
	})
	return name, path
}

// nodeDefaults are the kernel's own defaults for the switches that decide
// whether a node forwards pod traffic. A new network namespace does not
// start with them: with net.core.devconf_inherit_init_net at its default
// of 0, IPv4's conf/all and conf/default are copied from the machine's own
// namespace, so a machine on which something once turned ip_forward on
// would hide a missing sysctl from every test. IPv6's are reset already;
// writing them again costs nothing and keeps both families alike.
var nodeDefaults = []struct{ key, value string }{
	{"net/ipv4/ip_forward", "0"},
	{"net/ipv4/conf/all/forwarding", "0"},
	{"net/ipv4/conf/default/forwarding", "0"},
	{"net/ipv6/conf/all/forwarding", "0"},
	{"net/ipv6/conf/default/forwarding", "0"},
}

// NewNodeNetNS is NewNetNS for a namespace that models a node (a host
// that runs pods): forwarding is off in it, IPv4 and IPv6, as on a fresh
// host, whatever the machine running the test has, and lo is up. Tests
// that model a node use it, never the machine's own namespace.
func NewNodeNetNS(t testing.TB) (name, path string) {
	t.Helper()
	name, path = NewNetNS(t)
	err := netns.Do(path, func() error {
		for _, s := range nodeDefaults {
			if err := os.WriteFile("/proc/sys/"+s.key, []byte(s.value), 0); err != nil {
				return fmt.Errorf("sysctl %s=%s: %w", s.key, s.value, err)
			}
		}
		// Not internal/loif, nor dataplane: their tests import this.
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	})
	if err != nil {
		t.Fatalf("node namespace %s: %v", name, err)
	}
	return name, path
}
