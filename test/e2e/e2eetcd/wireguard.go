package e2eetcd

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/podnet/podnet/agent/route"
	"github.com/podnet/podnet/test/e2e/e2enet"
)

// WireGuardPort is the agents' --wireguard-port under WithWireGuard: the
// default, as shipped.
const WireGuardPort = 51871

// wgRunDir is where wireguard-go serves the UAPI socket wgctrl reaches.
const wgRunDir = "/run/wireguard"

// WithWireGuard turns encryption on for every agent started after it,
// each with its key file in its node's directory and, since two agents
// share this machine's /var/run, a mount namespace of its own with an
// empty /var/run/wireguard: a DaemonSet's pods have that from the host.
// Call it before the first agent starts.
func (c *Cluster) WithWireGuard() {
	t := c.T
	t.Helper()
	if _, err := os.Stat(wgRunDir); os.IsNotExist(err) {
		if err := os.Mkdir(wgRunDir, 0o755); err != nil {
			t.Fatal(err)
		}
		// Removed only if still empty: another user's sockets stay.
		t.Cleanup(func() { _ = syscall.Rmdir(wgRunDir) })
	}
	flags := c.AgentFlags
	c.AgentFlags = func(n *e2enet.Node) []string {
		return append(flags(n), "--encryption", "wireguard", "--wireguard-port", fmt.Sprint(WireGuardPort),
			"--wireguard-key-file", filepath.Join(n.Dir, "wireguard.key"))
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatalf("unshare (util-linux) is needed to give each agent its own /var/run/wireguard: %v", err)
	}
	c.AgentWrap = func(_ *e2enet.Node, argv []string) []string {
		return append([]string{unshare, "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
			`mount -t tmpfs -o mode=0755 podnet-wg ` + wgRunDir + ` && exec "$@"`, "sh"}, argv...)
	}
}

// WaitEncryptedRoutes waits until every block of to is routed through
// podnet.wg on from, and fails the test after timeout.
func (c *Cluster) WaitEncryptedRoutes(from, to *e2enet.Node, timeout time.Duration) {
	t := c.T
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if c.encryptedRoutes(from, to) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: routes to %s's blocks %v not through %s after %v", from.Name, to.Name, c.BlocksOf(to.Name), route.WireGuardDevice, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// encryptedRoutes says whether from routes every block of to straight
// onto podnet.wg (no gateway: WireGuard picks the peer by AllowedIPs).
func (c *Cluster) encryptedRoutes(from, to *e2enet.Node) bool {
	t := c.T
	t.Helper()
	wg, err := from.NS.Handle.LinkByName(route.WireGuardDevice)
	if err != nil {
		return false
	}
	owned, err := route.OwnedRoutes(from.NS.Handle)
	if err != nil {
		t.Fatal(err)
	}
	blocks := c.BlocksOf(to.Name)
	if len(blocks) == 0 {
		return false
	}
	for _, b := range blocks {
		r, have := owned[b]
		if !have || r.LinkIndex != wg.Attrs().Index || r.Gw != nil {
			return false
		}
	}
	return true
}
