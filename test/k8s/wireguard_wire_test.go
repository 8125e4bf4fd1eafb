package k8s_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// TestWireGuard's judge of the wire: what an AF_PACKET reader on node 1's
// switch port (cluster.Capture) saw while the pods talked.

// wgPort is podnet.wg's UDP port, the DaemonSet's --wireguard-port as
// shipped.
const wgPort = 51871

// hostTCPPorts are the ports of the host traffic between the two nodes,
// which encryption leaves alone (docs/encryption.md): node 2's kubelet,
// kube-proxy and agent to the API server on node 1, and the API server
// to node 2's kubelet (pod logs) and to node 2's agent's metrics port
// (9603, host network: the pod proxy the dashboard check and podnet
// flows read it through). Pod traffic never has a node's address on both
// ends: it keeps the pods' addresses (podnet does not NAT pod to pod),
// which only WireGuard's UDP hides.
var hostTCPPorts = map[uint16]bool{6443: true, 10250: true, 9603: true}

var serviceCIDR = netip.MustParsePrefix(cluster.ServiceCIDR)

// wireReport counts a window's frames.
type wireReport struct {
	frames, dropped int
	// payload counts frames that hold the secret payload; podAddressed
	// those with a pod's or a Service's address, outside or quoted in an
	// ICMP error.
	payload, podAddressed int
	// wireguard counts UDP between node addresses to or from wgPort
	// (and ICMP errors about such a datagram, wgErrors); host the TCP
	// between node addresses to or from hostTCPPorts.
	wireguard, wgErrors, host int
	// other is every other packet between node addresses, by kind.
	other map[string]int
}

// readWire counts frames (dropped: frames the socket lost) against the
// payload and the node addresses.
func readWire(frames [][]byte, dropped int, payload []byte, nodes map[netip.Addr]bool) wireReport {
	r := wireReport{frames: len(frames), dropped: dropped, other: map[string]int{}}
	podAddr := func(a netip.Addr) bool { return shippedPool.Contains(a) || serviceCIDR.Contains(a) }
	isWG := func(p cluster.Packet) bool {
		return p.Proto == syscall.IPPROTO_UDP && (p.SrcPort == wgPort || p.DstPort == wgPort)
	}
	for _, f := range frames {
		if len(payload) > 0 && bytes.Contains(f, payload) {
			r.payload++
		}
		p, ok := cluster.ParseFrame(f)
		if !ok {
			continue
		}
		if podAddr(p.Src) || podAddr(p.Dst) || p.Inner != nil && (podAddr(p.Inner.Src) || podAddr(p.Inner.Dst)) {
			r.podAddressed++
		}
		if !nodes[p.Src] || !nodes[p.Dst] {
			continue
		}
		switch {
		case isWG(p):
			r.wireguard++
		case p.Inner != nil && isWG(*p.Inner):
			r.wgErrors++
		case p.Proto == syscall.IPPROTO_TCP && (hostTCPPorts[p.SrcPort] || hostTCPPorts[p.DstPort]):
			r.host++
		default:
			q := p
			q.SrcPort, q.DstPort = min(p.SrcPort, p.DstPort), 0 // a kind, not a flow
			r.other[q.String()]++
		}
	}
	return r
}

func (r wireReport) String() string {
	var other []string
	for k, n := range r.other {
		other = append(other, fmt.Sprintf("%dx %s", n, k))
	}
	slices.Sort(other)
	return fmt.Sprintf("%d frames (%d dropped by the reader): payload in %d, a pod or Service address in %d; between the nodes: %d WireGuard UDP %d, %d ICMP errors about it, %d host TCP (API server, kubelet), other %v",
		r.frames, r.dropped, r.payload, r.podAddressed, r.wireguard, wgPort, r.wgErrors, r.host, other)
}

// encrypted says what is wrong with a window that must show only
// encrypted pod traffic: minWG WireGuard frames at least (the reader saw
// the pods' traffic go by), none of the payload, no pod address, nothing
// between the nodes but WireGuard and host TCP, no frame lost.
func (r wireReport) encrypted(minWG int) error {
	var bad []string
	if r.dropped != 0 {
		bad = append(bad, fmt.Sprintf("the reader dropped %d frames", r.dropped))
	}
	if r.wireguard < minWG {
		bad = append(bad, fmt.Sprintf("%d WireGuard frames, want at least %d", r.wireguard, minWG))
	}
	if r.payload != 0 || r.podAddressed != 0 {
		bad = append(bad, fmt.Sprintf("IN THE CLEAR: payload in %d frames, pod addresses in %d", r.payload, r.podAddressed))
	}
	if len(r.other) != 0 {
		bad = append(bad, fmt.Sprintf("between the nodes, neither WireGuard nor host TCP: %v", r.other))
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%s (%s)", strings.Join(bad, "; "), r)
}

// secretPayload is a random payload no other traffic carries.
func secretPayload(t *testing.T) []byte {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return []byte("podnet-k8s-wireguard-judge-" + hex.EncodeToString(b))
}

// exchange sends payload from the pod whose network namespace is src to
// the pod at dstIP (namespace dst) over TCP and over UDP, and checks that
// each comes back: the server side echoes it. The sockets are the test
// process's, made inside the pods' namespaces: the pods' own path.
func exchange(src, dst *netns.NetNS, dstIP netip.Addr, payload []byte, timeout time.Duration) error {
	var tl net.Listener
	var ul net.PacketConn
	err := dst.Do(func() (err error) {
		if tl, err = net.Listen("tcp4", net.JoinHostPort(dstIP.String(), "0")); err != nil {
			return err
		}
		ul, err = net.ListenPacket("udp4", net.JoinHostPort(dstIP.String(), "0"))
		return err
	})
	if err != nil {
		if tl != nil {
			tl.Close()
		}
		return err
	}
	defer tl.Close()
	defer ul.Close()
	go echoTCP(tl, timeout)
	go echoUDP(ul, timeout)
	var tc, uc net.Conn
	err = src.Do(func() (err error) {
		if tc, err = (&net.Dialer{Timeout: timeout}).Dial("tcp4", tl.Addr().String()); err != nil {
			return fmt.Errorf("tcp: %w", err)
		}
		uc, err = net.Dial("udp4", ul.LocalAddr().String())
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
	_ = tc.SetDeadline(time.Now().Add(timeout))
	if _, err := tc.Write(payload); err != nil {
		return fmt.Errorf("tcp: %w", err)
	}
	_ = tc.(*net.TCPConn).CloseWrite()
	if got, err := io.ReadAll(tc); err != nil || !bytes.Equal(got, payload) {
		return fmt.Errorf("tcp: echo %q, %v", got, err)
	}
	_ = uc.SetDeadline(time.Now().Add(timeout))
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

func echoTCP(l net.Listener, timeout time.Duration) {
	c, err := l.Accept()
	if err != nil {
		return
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	b, _ := io.ReadAll(c)
	_, _ = c.Write(b)
}

func echoUDP(c net.PacketConn, timeout time.Duration) {
	buf := make([]byte, 2048)
	_ = c.SetDeadline(time.Now().Add(timeout))
	n, from, err := c.ReadFrom(buf)
	if err == nil {
		_, _ = c.WriteTo(buf[:n], from)
	}
}
