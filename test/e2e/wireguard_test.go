package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podnet/podnet/agent/route"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/test/e2e/e2eetcd"
	"github.com/podnet/podnet/test/e2e/e2enet"
)

// wgPort is the agents' --wireguard-port: the default, as shipped.
const wgPort = e2eetcd.WireGuardPort

// TestWireGuardOnTheWire: two nodes on one L2 segment (host-gw), pods
// dual-stack, agents with --encryption wireguard (wireguard-go here: no
// kernel WireGuard on the test machines). A pod on n1 sends a known
// payload over TCP and UDP, IPv4 and IPv6, to a pod on n2 while an
// AF_PACKET reader on n1's switch port records every frame: the payload
// never appears, no pod address is seen, and the only packets between
// the node addresses are UDP to or from the WireGuard port. Then UDP to
// the WireGuard port is dropped on the switch (strict mode): the pods
// see loss and still nothing leaves in the clear. n1's key is rotated
// (podnet wireguard rotate-key) under continuous probes: nothing in the
// clear, and the gap is logged. The same exchange
// without encryption finds the payload, so the check can fail.
//
// A second cluster, vxlan mode across a router (the nodes on subnets of
// their own), checks the same on the wire with the endpoints routed, and
// the pod MTU less WireGuard's overhead alone (pod packets go through
// podnet.wg, never podnet.vxlan).
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
		c.WithWireGuard()
		podMTU = 1500 - route.WireGuardOverhead4
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
	checkRotation(t, c, cap, src, dst, payload, nodes)
	checkBadKeyFile(t, c)
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

// waitEncryptedRoutes waits until every block of to is routed through
// podnet.wg on from.
func waitEncryptedRoutes(t *testing.T, c *cluster, from, to *e2enet.Node) {
	t.Helper()
	c.WaitEncryptedRoutes(from, to, 10*time.Second)
}
