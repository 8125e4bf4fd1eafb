package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/agent/clusterstate"
	"github.com/podnet/podnet/agent/route"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/test/e2e/e2enet"
)

// wgPort is the agents' --wireguard-port: the default, as shipped.
const wgPort = 51871

// TestWireGuardOnTheWire: two nodes on one L2 segment (host-gw), pods
// dual-stack, agents with --encryption wireguard (wireguard-go here: no
// kernel WireGuard on the test machines). A pod on n1 sends a known
// payload over TCP and UDP, IPv4 and IPv6, to a pod on n2 while an
// AF_PACKET reader on n1's switch port records every frame: the payload
// never appears, no pod address is seen, and the only packets between
// the node addresses are UDP to or from the WireGuard port. Then UDP to
// the WireGuard port is dropped on the switch (strict mode): the pods
// see loss and still nothing leaves in the clear. The same exchange
// without encryption finds the payload, so the check can fail.
//
// A second cluster, vxlan mode across a router (the nodes on subnets of
// their own), checks the same on the wire with the endpoints routed, and
// the pod MTU less VXLAN's and WireGuard's overheads.
func TestWireGuardOnTheWire(t *testing.T) {
	testutil.RequireRoot(t)
	t.Run("encrypted", func(t *testing.T) { onTheWire(t, true, e2enet.NewSwitch, route.ModeHostGW, "sw-n1") })
	t.Run("encrypted vxlan across a router", func(t *testing.T) { onTheWire(t, true, e2enet.NewRouter, route.ModeVXLAN, "r-n1") })
	t.Run("clear", func(t *testing.T) { onTheWire(t, false, e2enet.NewSwitch, route.ModeHostGW, "sw-n1") })
}

// onTheWire runs the judge on a new cluster of underlay u in mode, the
// reader on the hub's port to n1; the strict-mode, key and restart
// checks in host-gw only.
func onTheWire(t *testing.T, encrypt bool, u func(testing.TB) *e2enet.Underlay, mode route.Mode, port string) {
	c := newCluster(t, u(t), mode, true)
	podMTU := 1500 - route.EncapOverhead(mode, false)
	if encrypt {
		withWireGuard(t, c)
		podMTU -= route.WireGuardOverhead4
	}
	nodes := c.startNodes(2)
	n1, n2 := nodes[0], nodes[1]
	checkInstalled(t, c, n1, podMTU)
	if encrypt {
		waitEncryptedRoutes(t, c, n1, n2)
		waitEncryptedRoutes(t, c, n2, n1)
		if m := c.Get(n1, "/metrics"); !strings.Contains(m, `podnet_agent_wireguard_info{implementation="userspace"} 1`) {
			t.Errorf("n1's metrics have no podnet_agent_wireguard_info{implementation=\"userspace\"} 1")
		}
	}
	// Full-sized segments fit podnet.wg and the underlay from the first
	// (no ICMP on the way); the time logged is a rough figure of the
	// path's cost, not a benchmark.
	c.CheckPodMTU(podMTU)
	c.CheckBulkTransfer(n1.Pods[0], n2.Pods[0], 16<<20)
	src, dst := n1.Pods[0], n2.Pods[0]
	cap := startCapture(t, c.U.Hub.Path, port)
	payload := secretPayload(t)
	for _, ip := range []netip.Addr{dst.IP, dst.IP6} {
		if err := exchange(src, dst, ip, payload); err != nil {
			t.Fatalf("pod traffic %s -> %s: %v", src.ID, ip, err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	frames := cap.take()
	found, clearPods, other := inspect(frames, payload, c, nodes)
	t.Logf("encryption %v, %s: %d frames on %s, payload found %d times, %d with pod addresses, %d other between nodes",
		encrypt, mode, len(frames), port, found, clearPods, len(other))
	if !encrypt {
		if found == 0 || clearPods == 0 {
			t.Fatalf("without encryption the payload should be on the wire in the clear: found %d, pod-addressed frames %d", found, clearPods)
		}
		return
	}
	if found != 0 || clearPods != 0 || len(other) != 0 {
		t.Fatalf("encrypted: payload found %d times, %d frames with pod addresses, between nodes not WireGuard: %v", found, clearPods, other)
	}
	defer checkKeyNotLogged(t, nodes)
	if mode != route.ModeHostGW {
		return
	}
	strictBlocked(t, c, cap, src, dst, payload, nodes)
	strictNoKey(t, c, cap, src, dst, payload, nodes)
	checkKeyKept(t, c, n1)
	checkKilled(t, c, cap, src, dst, payload, nodes)
	checkBadKeyFile(t, c)
}

// withWireGuard turns encryption on for every agent, each with its key
// file in its node's directory and, since two agents share this
// machine's /var/run, a mount namespace of its own with an empty
// /var/run/wireguard (where wireguard-go serves the UAPI socket wgctrl
// reaches): a DaemonSet's pods have that from the host.
func withWireGuard(t *testing.T, c *cluster) {
	const dir = "/run/wireguard"
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		// Removed only if still empty: another user's sockets stay.
		t.Cleanup(func() { _ = syscall.Rmdir(dir) })
	}
	flags := c.AgentFlags
	c.AgentFlags = func(n *e2enet.Node) []string {
		return append(flags(n), "--encryption", "wireguard", "--wireguard-port", fmt.Sprint(wgPort),
			"--wireguard-key-file", filepath.Join(n.Dir, "wireguard.key"))
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatalf("unshare (util-linux) is needed to give each agent its own /var/run/wireguard: %v", err)
	}
	c.AgentWrap = func(_ *e2enet.Node, argv []string) []string {
		return append([]string{unshare, "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
			`mount -t tmpfs -o mode=0755 podnet-wg ` + dir + ` && exec "$@"`, "sh"}, argv...)
	}
}

// waitEncryptedRoutes waits until every block of to is routed through
// podnet.wg on from.
func waitEncryptedRoutes(t *testing.T, c *cluster, from, to *e2enet.Node) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		wg, err := from.NS.Handle.LinkByName(route.WireGuardDevice)
		ok := err == nil
		if ok {
			owned, err := route.OwnedRoutes(from.NS.Handle)
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range c.BlocksOf(to.Name) {
				r, have := owned[b]
				ok = ok && have && r.LinkIndex == wg.Attrs().Index && r.Gw == nil
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: routes to %s's blocks %v not through %s after 10s", from.Name, to.Name, c.BlocksOf(to.Name), route.WireGuardDevice)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// secretPayload is a payload no other traffic of the test carries.
func secretPayload(t *testing.T) []byte {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return []byte("podnet-wireguard-judge-" + hex.EncodeToString(b))
}

// exchange sends payload from src to dst's address ip over TCP and over
// UDP, and checks that dst echoes it back each way.
func exchange(src, dst *e2enet.Pod, ip netip.Addr, payload []byte) error {
	var tl net.Listener
	var ul net.PacketConn
	err := netns.Do(dst.NS, func() (err error) {
		if tl, err = net.Listen("tcp", net.JoinHostPort(ip.String(), "0")); err != nil {
			return err
		}
		ul, err = net.ListenPacket("udp", net.JoinHostPort(ip.String(), "0"))
		return err
	})
	if err != nil {
		return err
	}
	defer tl.Close()
	defer ul.Close()
	go func() {
		c, err := tl.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		b, _ := io.ReadAll(c)
		_, _ = c.Write(b)
	}()
	go func() {
		buf := make([]byte, 2048)
		_ = ul.SetDeadline(time.Now().Add(3 * time.Second))
		n, from, err := ul.ReadFrom(buf)
		if err == nil {
			_, _ = ul.WriteTo(buf[:n], from)
		}
	}()
	var tc, uc net.Conn
	err = netns.Do(src.NS, func() (err error) {
		if tc, err = (&net.Dialer{Timeout: 2 * time.Second}).Dial("tcp", tl.Addr().String()); err != nil {
			return fmt.Errorf("tcp: %w", err)
		}
		uc, err = net.Dial("udp", ul.LocalAddr().String())
		return err
	})
	if err != nil {
		if tc != nil {
			tc.Close()
		}
		return err
	}
	defer tc.Close()
	defer uc.Close()
	_ = tc.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := tc.Write(payload); err != nil {
		return fmt.Errorf("tcp: %w", err)
	}
	_ = tc.(*net.TCPConn).CloseWrite()
	if got, err := io.ReadAll(tc); err != nil || !bytes.Equal(got, payload) {
		return fmt.Errorf("tcp: echo %q, %v", got, err)
	}
	_ = uc.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := uc.Write(payload); err != nil {
		return fmt.Errorf("udp: %w", err)
	}
	buf := make([]byte, 2048)
	n, err := uc.Read(buf)
	if err != nil || !bytes.Equal(buf[:n], payload) {
		return fmt.Errorf("udp: echo %q, %v", buf[:n], err)
	}
	return nil
}

// inspect counts the frames that carry payload and those with a pod
// address (in the clear), and describes every packet between two node
// addresses that is not UDP to or from the WireGuard port.
func inspect(frames [][]byte, payload []byte, c *cluster, nodes []*e2enet.Node) (found, clearPods int, other []string) {
	isNode := map[netip.Addr]bool{}
	for _, n := range nodes {
		isNode[n.Addr], isNode[n.Addr6] = true, true
	}
	inPool := func(a netip.Addr) bool {
		for _, p := range c.Pools() {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	for _, f := range frames {
		if bytes.Contains(f, payload) {
			found++
		}
		p, ok := parseFrame(f)
		if !ok {
			continue
		}
		if inPool(p.src) || inPool(p.dst) {
			clearPods++
		}
		wg := p.proto == syscall.IPPROTO_UDP && (p.srcPort == wgPort || p.dstPort == wgPort)
		if isNode[p.src] && isNode[p.dst] && !wg {
			other = append(other, fmt.Sprintf("%s:%d -> %s:%d proto %d", p.src, p.srcPort, p.dst, p.dstPort, p.proto))
		}
	}
	return found, clearPods, other
}

// strictBlocked drops UDP to the WireGuard port on the switch: pod
// traffic is lost and nothing leaves n1 in the clear; once the drop goes,
// traffic resumes encrypted.
func strictBlocked(t *testing.T, c *cluster, cap *capture, src, dst *e2enet.Pod, payload []byte, nodes []*e2enet.Node) {
	t.Helper()
	nft(t, c.U.Hub.Path, fmt.Sprintf("add table bridge podnet_wg_judge\n"+
		"add chain bridge podnet_wg_judge judge { type filter hook forward priority 0; }\n"+
		"add rule bridge podnet_wg_judge judge udp dport %d drop\n", wgPort))
	removed := false
	remove := func() {
		if !removed {
			removed = true
			nft(t, c.U.Hub.Path, "delete table bridge podnet_wg_judge\n")
		}
	}
	t.Cleanup(remove)
	cap.take()
	for _, ip := range []netip.Addr{dst.IP, dst.IP6} {
		if err := exchange(src, dst, ip, payload); err == nil {
			t.Errorf("UDP %d dropped on the underlay, yet pod traffic to %s got through", wgPort, ip)
		} else {
			t.Logf("blocked, as it should be: %s: %v", ip, err)
		}
	}
	frames := cap.take()
	found, clearPods, other := inspect(frames, payload, c, nodes)
	t.Logf("strict: %d frames on sw-n1, payload %d, pod-addressed %d, other %d", len(frames), found, clearPods, len(other))
	if found != 0 || clearPods != 0 || len(other) != 0 {
		t.Errorf("strict: payload found %d times, %d frames with pod addresses, between nodes not WireGuard: %v", found, clearPods, other)
	}
	remove()
	start := time.Now()
	for {
		err := exchange(src, dst, dst.IP, payload)
		if err == nil {
			t.Logf("traffic resumed %v after the drop went", time.Since(start).Round(time.Millisecond))
			break
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("traffic did not resume within 20s of the drop going: %v", err)
		}
	}
}

// nft runs script in the namespace at ns.
func nft(t *testing.T, ns, script string) {
	t.Helper()
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := netns.Do(ns, cmd.Run); err != nil {
		t.Fatalf("nft %q: %v: %s", script, err, out.String())
	}
}

// checkKeyKept: n's key file is 0600; a SIGTERM ends its userspace
// device with the agent; the restarted agent reloads the key (the same
// public key in its record) and the encrypted routes come back.
func checkKeyKept(t *testing.T, c *cluster, n *e2enet.Node) {
	t.Helper()
	keyFile := filepath.Join(n.Dir, "wireguard.key")
	fi, err := os.Stat(keyFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file %s: %v, mode %v; want 0600", keyFile, err, fi.Mode().Perm())
	}
	before := c.NodeRecord(n.Name).WireGuardKey
	c.StopAgent(n, syscall.SIGTERM)
	if _, err := n.NS.Handle.LinkByName(route.WireGuardDevice); err == nil {
		t.Errorf("%s: %s still there after its agent stopped; a userspace device ends with the agent", n.Name, route.WireGuardDevice)
	}
	c.StartAgent(n)
	if after := c.NodeRecord(n.Name).WireGuardKey; after != before || before == "" {
		t.Errorf("%s: public key %q after restart, %q before; want the same, from the kept file", n.Name, after, before)
	}
	other := c.Nodes()[1]
	waitEncryptedRoutes(t, c, n, other)
}

// strictNoKey takes dst's node's key out of its record (kept under its
// lease, as if the key had not arrived yet), then puts a malformed one
// there: src's node routes that node's blocks unreachable, the pod gets
// an error at once, nothing leaves in the clear; with the key back,
// traffic flows encrypted again.
func strictNoKey(t *testing.T, c *cluster, cap *capture, src, dst *e2enet.Pod, payload []byte, nodes []*e2enet.Node) {
	t.Helper()
	from, to := src.Node, dst.Node
	key := clusterstate.NodeKey(ipam.DefaultPrefix, to.Name)
	ctx := t.Context()
	got, err := c.Client.Get(ctx, key)
	if err != nil || len(got.Kvs) != 1 {
		t.Fatalf("get %s: %v", key, err)
	}
	orig, lease := got.Kvs[0].Value, clientv3.LeaseID(got.Kvs[0].Lease)
	put := func(wgKey string) {
		var rec clusterstate.NodeRecord
		if err := json.Unmarshal(orig, &rec); err != nil {
			t.Fatal(err)
		}
		rec.WireGuardKey = wgKey
		b, _ := json.Marshal(rec)
		if _, err := c.Client.Put(ctx, key, string(b), clientv3.WithLease(lease)); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []string{"", "bm90LWEta2V5"} {
		put(bad)
		waitUnreachable(t, c, from, to)
		cap.take()
		for _, ip := range []netip.Addr{dst.IP, dst.IP6} {
			err := exchange(src, dst, ip, payload)
			if err == nil || !errors.Is(err, unix.EHOSTUNREACH) && !errors.Is(err, unix.ENETUNREACH) {
				t.Errorf("key %q: pod traffic to %s: %v; want unreachable", bad, ip, err)
			}
		}
		found, clearPods, other := inspect(cap.take(), payload, c, nodes)
		if found != 0 || clearPods != 0 || len(other) != 0 {
			t.Errorf("key %q: payload found %d times, %d frames with pod addresses, other %v", bad, found, clearPods, other)
		}
	}
	start := time.Now()
	if _, err := c.Client.Put(ctx, key, string(orig), clientv3.WithLease(lease)); err != nil {
		t.Fatal(err)
	}
	waitEncryptedRoutes(t, c, from, to)
	if err := exchange(src, dst, dst.IP, payload); err != nil {
		t.Fatalf("key back: %v", err)
	}
	t.Logf("key back in the record to an encrypted exchange done: %v", time.Since(start).Round(time.Millisecond))
}

// waitUnreachable waits until every block of to is an unreachable route
// on from.
func waitUnreachable(t *testing.T, c *cluster, from, to *e2enet.Node) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		owned, err := route.OwnedRoutes(from.NS.Handle)
		if err != nil {
			t.Fatal(err)
		}
		ok := true
		for _, b := range c.BlocksOf(to.Name) {
			r, have := owned[b]
			ok = ok && have && r.Type == unix.RTN_UNREACHABLE
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: routes to %s's blocks not unreachable after 10s: %v", from.Name, to.Name, owned)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkBadKeyFile: a node whose key file is not a key runs, is not
// ready, says why naming the file, and publishes no key (so its peers
// refuse it rather than send in the clear); the file is left as it was.
func checkBadKeyFile(t *testing.T, c *cluster) {
	t.Helper()
	n := c.addNode(3)
	keyFile := filepath.Join(n.Dir, "wireguard.key")
	if err := os.WriteFile(keyFile, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.LaunchAgent(n)
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := c.Ready(n)
		if err != nil && strings.Contains(err.Error(), keyFile) && strings.Contains(err.Error(), "wireguard") {
			t.Logf("bad key file: not ready, as it should be: %v", err)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent with a bad key file: readiness %v; want not ready naming %s", err, keyFile)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if rec := c.NodeRecord(n.Name); rec.WireGuardKey != "" {
		t.Errorf("node with a bad key file published key %q", rec.WireGuardKey)
	}
	if b, _ := os.ReadFile(keyFile); string(b) != "not a key\n" {
		t.Errorf("bad key file replaced: %q", b)
	}
}

// checkKilled: src's node has a default route through the underlay (as
// a real node has), and its agent is killed (SIGKILL): the userspace
// device ends with it and the kernel drops the routes through it, yet
// pod traffic to dst is refused (the unreachable fallbacks under the
// encrypted routes) rather than sent in the clear to the default
// gateway. The restarted agent brings the encrypted path back.
func checkKilled(t *testing.T, c *cluster, cap *capture, src, dst *e2enet.Pod, payload []byte, nodes []*e2enet.Node) {
	t.Helper()
	n := src.Node
	ul, err := n.NS.Handle.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	def := &netlink.Route{LinkIndex: ul.Attrs().Index, Gw: c.U.Server.AsSlice()}
	if err := n.NS.Handle.RouteAdd(def); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = n.NS.Handle.RouteDel(def) }()
	c.StopAgent(n, syscall.SIGKILL)
	if _, err := n.NS.Handle.LinkByName(route.WireGuardDevice); err == nil {
		t.Errorf("%s: %s still there after its agent was killed", n.Name, route.WireGuardDevice)
	}
	cap.take()
	err = exchange(src, dst, dst.IP, payload)
	if err == nil || !errors.Is(err, unix.EHOSTUNREACH) && !errors.Is(err, unix.ENETUNREACH) {
		t.Errorf("agent killed: pod traffic to %s: %v; want unreachable", dst.IP, err)
	}
	found, clearPods, other := inspect(cap.take(), payload, c, nodes)
	if found != 0 || clearPods != 0 || len(other) != 0 {
		t.Errorf("agent killed: payload found %d times, %d frames with pod addresses, other %v", found, clearPods, other)
	}
	start := time.Now()
	c.StartAgent(n)
	waitEncryptedRoutes(t, c, n, dst.Node)
	if err := exchange(src, dst, dst.IP, payload); err != nil {
		t.Fatalf("agent back: %v", err)
	}
	t.Logf("agent restarted after SIGKILL to an encrypted exchange done: %v", time.Since(start).Round(time.Millisecond))
}

// checkKeyNotLogged: no agent's log holds its private key.
func checkKeyNotLogged(t *testing.T, nodes []*e2enet.Node) {
	t.Helper()
	for _, n := range nodes {
		b, err := os.ReadFile(filepath.Join(n.Dir, "wireguard.key"))
		key := strings.TrimSpace(string(b))
		if err != nil || key == "" {
			t.Errorf("%s: key file: %v", n.Name, err)
			continue
		}
		if log := n.Log(); log == "" || strings.Contains(log, key) {
			t.Errorf("%s: the agent's log (%d bytes) is empty or holds the private key", n.Name, len(log))
		}
	}
}
