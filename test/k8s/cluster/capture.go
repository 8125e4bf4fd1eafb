package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/netns"
)

// Capture reads every frame on one link (AF_PACKET, every protocol, both
// directions), what tcpdump on that link would see, until closed. A
// judge of what goes on the wire takes the frames of a window with Take
// and must count them: a reader that saw nothing proves nothing.
type Capture struct {
	link string
	fd   int
	mu   sync.Mutex
	// frames are those read since the last Take.
	frames [][]byte
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
}

// captureBuffer is the socket's receive buffer: a burst of frames while
// the reader is descheduled on a loaded machine must not be dropped
// (Take reports the kernel's drops all the same).
const captureBuffer = 8 << 20

// CaptureSwitchPort starts a capture on the switch's port to n, in the
// outside network's namespace: every frame n sends to the underlay or
// gets from it, whoever else is on the switch. Close it when done.
func (n *Node) CaptureSwitchPort() (*Capture, error) {
	return StartCapture(netns.NamedPath(n.c.OutsideNetNS), n.SwitchPort())
}

// SwitchPort is the name of the switch's port to n (the far end of n's
// underlay link), in the outside network's namespace.
func (n *Node) SwitchPort() string { return fmt.Sprintf("uplink%d", n.index) }

// StartCapture opens the socket inside the network namespace at nsPath,
// bound to link, and starts reading.
func StartCapture(nsPath, link string) (*Capture, error) {
	c := &Capture{link: link, fd: -1, stop: make(chan struct{}), done: make(chan struct{})}
	err := netns.Do(nsPath, func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		c.fd = fd
		ifi, err := net.InterfaceByName(link)
		if err != nil {
			return err
		}
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, captureBuffer)
		tv := unix.NsecToTimeval((100 * time.Millisecond).Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index})
	})
	if err != nil {
		if c.fd >= 0 {
			unix.Close(c.fd)
		}
		return nil, fmt.Errorf("capture on %s in %s: %w", link, nsPath, err)
	}
	// The counters start at the bind; what came before is not ours.
	_, _ = unix.GetsockoptTpacketStats(c.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	go c.read()
	return c, nil
}

func (c *Capture) read() {
	defer close(c.done)
	buf := make([]byte, 1<<16)
	for {
		select {
		case <-c.stop:
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
}

// Take returns the frames read since the last Take (or the start) and
// forgets them. dropped is how many frames the kernel dropped for this
// socket over the same time (a full buffer): a judge that needs every
// frame fails on a nonzero count.
func (c *Capture) Take() (frames [][]byte, dropped int) {
	// Frames already queued on the socket belong to the window that is
	// ending: give the reader a moment to drain them.
	time.Sleep(50 * time.Millisecond)
	st, err := unix.GetsockoptTpacketStats(c.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	if err == nil {
		dropped = int(st.Drops)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	frames, c.frames = c.frames, nil
	return frames, dropped
}

// Link is the link the capture reads.
func (c *Capture) Link() string { return c.link }

// Close stops the reader and closes the socket; it may be called more
// than once.
func (c *Capture) Close() error {
	c.once.Do(func() {
		close(c.stop)
		<-c.done
		unix.Close(c.fd)
	})
	return nil
}

// Packet is what a judge of the wire needs of a captured IP packet: its
// addresses, protocol and TCP or UDP ports, and for an ICMP error, the
// header of the packet it quotes (Inner).
type Packet struct {
	Src, Dst         netip.Addr
	Proto            uint8
	SrcPort, DstPort uint16
	Inner            *Packet
}

func (p Packet) String() string {
	s := fmt.Sprintf("%s:%d -> %s:%d proto %d", p.Src, p.SrcPort, p.Dst, p.DstPort, p.Proto)
	if p.Inner != nil {
		s += " quoting " + p.Inner.String()
	}
	return s
}

// errNotIP is ParseFrame's answer for frames that carry no IP packet
// (ARP, LLDP...).
var errNotIP = errors.New("not an IP packet")

// ParseFrame reads an Ethernet frame's IPv4 or IPv6 packet. ok is false
// for a frame that is not IP.
func ParseFrame(f []byte) (p Packet, ok bool) {
	if len(f) < 14 {
		return p, false
	}
	switch binary.BigEndian.Uint16(f[12:14]) {
	case unix.ETH_P_IP, unix.ETH_P_IPV6:
		p, err := parseIP(f[14:], true)
		return p, err == nil
	}
	return p, false
}

// parseIP reads an IP packet's header and ports; with icmp, an ICMP
// error's quoted packet too (one level: a quote's quote is not read).
func parseIP(ip []byte, icmp bool) (p Packet, err error) {
	if len(ip) < 1 {
		return p, errNotIP
	}
	var l4 []byte
	switch ip[0] >> 4 {
	case 4:
		ihl := int(ip[0]&0x0f) * 4
		if len(ip) < 20 || ihl < 20 || len(ip) < ihl {
			return p, errNotIP
		}
		p.Src, p.Dst = netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
		p.Proto, l4 = ip[9], ip[ihl:]
	case 6:
		if len(ip) < 40 {
			return p, errNotIP
		}
		p.Src, p.Dst = netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
		p.Proto, l4 = ip[6], ip[40:]
	default:
		return p, errNotIP
	}
	switch {
	case (p.Proto == unix.IPPROTO_TCP || p.Proto == unix.IPPROTO_UDP) && len(l4) >= 4:
		p.SrcPort, p.DstPort = binary.BigEndian.Uint16(l4[0:2]), binary.BigEndian.Uint16(l4[2:4])
	case icmp && len(l4) > 8 && isICMPError(p.Proto, l4[0]):
		if in, err := parseIP(l4[8:], false); err == nil {
			p.Inner = &in
		}
	}
	return p, nil
}

// isICMPError says whether an ICMP message of type typ quotes the packet
// it is about: destination unreachable, time exceeded, parameter
// problem (and ICMPv6's packet too big).
func isICMPError(proto, typ uint8) bool {
	switch proto {
	case unix.IPPROTO_ICMP:
		return typ == 3 || typ == 11 || typ == 12
	case unix.IPPROTO_ICMPV6:
		return typ >= 1 && typ <= 4
	}
	return false
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
