package e2e

import (
	"encoding/binary"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/netns"
)

// capture reads every frame on one link of a namespace (AF_PACKET, all
// protocols, both directions) until stopped.
type capture struct {
	fd     int
	mu     sync.Mutex
	frames [][]byte
	done   chan struct{}
}

// startCapture opens the socket inside ns on link ifName.
func startCapture(t *testing.T, ns, ifName string) *capture {
	t.Helper()
	c := &capture{fd: -1, done: make(chan struct{})}
	err := netns.Do(ns, func() error {
		proto := int(htons(unix.ETH_P_ALL))
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
		if err != nil {
			return err
		}
		c.fd = fd
		ifi, err := netIfIndex(ifName)
		if err != nil {
			return err
		}
		tv := unix.NsecToTimeval((100 * time.Millisecond).Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi})
	})
	if err != nil {
		if c.fd >= 0 {
			unix.Close(c.fd)
		}
		t.Fatalf("capture on %s: %v", ifName, err)
	}
	stop := make(chan struct{})
	go func() {
		defer close(c.done)
		buf := make([]byte, 65536)
		for {
			select {
			case <-stop:
				return
			default:
			}
			n, _, err := unix.Recvfrom(c.fd, buf, 0)
			if err != nil {
				continue // the timeout, to look at stop
			}
			c.mu.Lock()
			c.frames = append(c.frames, append([]byte(nil), buf[:n]...))
			c.mu.Unlock()
		}
	}()
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(stop); <-c.done; unix.Close(c.fd) }) })
	return c
}

// take returns the frames captured so far and forgets them.
func (c *capture) take() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.frames
	c.frames = nil
	return f
}

// packet is what the checks need of a captured IP packet.
type packet struct {
	src, dst         netip.Addr
	proto            uint8
	srcPort, dstPort uint16
}

// parseFrame reads an Ethernet frame's IPv4 or IPv6 header and its
// TCP/UDP ports; ok is false for anything else (ARP, NDP is IPv6 and
// parses).
func parseFrame(f []byte) (p packet, ok bool) {
	if len(f) < 14 {
		return p, false
	}
	l4 := []byte(nil)
	switch binary.BigEndian.Uint16(f[12:14]) {
	case unix.ETH_P_IP:
		ip := f[14:]
		if len(ip) < 20 {
			return p, false
		}
		p.src, p.dst = netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
		p.proto = ip[9]
		if ihl := int(ip[0]&0x0f) * 4; len(ip) >= ihl {
			l4 = ip[ihl:]
		}
	case unix.ETH_P_IPV6:
		ip := f[14:]
		if len(ip) < 40 {
			return p, false
		}
		p.src, p.dst = netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
		p.proto = ip[6]
		l4 = ip[40:]
	default:
		return p, false
	}
	if (p.proto == unix.IPPROTO_TCP || p.proto == unix.IPPROTO_UDP) && len(l4) >= 4 {
		p.srcPort, p.dstPort = binary.BigEndian.Uint16(l4[0:2]), binary.BigEndian.Uint16(l4[2:4])
	}
	return p, true
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func netIfIndex(name string) (int, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return 0, err
	}
	return ifi.Index, nil
}
