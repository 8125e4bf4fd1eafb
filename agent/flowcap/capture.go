package flowcap

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"github.com/mdlayher/netlink"
	"github.com/ti-mo/conntrack"
	"golang.org/x/sys/unix"
)

// ReceiveBuffer is the default size of the conntrack socket's receive
// buffer: thousands of events queued while the agent is not scheduled
// (an event's buffer costs about 1 KiB of it). It is forced past
// net.core.rmem_max (the agent is privileged).
const ReceiveBuffer = 4 << 20

// ctConn is a socket joined to ctnetlink's NEW and DESTROY groups.
// ti-mo/conntrack's Conn.Listen ends its worker at the first receive
// error, ENOBUFS included; the capture must count a loss and go on, so
// it reads the socket itself and uses the library to decode each event.
type ctConn struct {
	c *netlink.Conn
	// drops is the socket's drop count when it was last read.
	drops uint32
}

// listenConntrack opens the socket in the calling thread's network
// namespace, with a receive buffer of rcvbuf bytes.
func listenConntrack(rcvbuf int) (*ctConn, error) {
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return nil, fmt.Errorf("flowcap: open netfilter netlink socket: %w", err)
	}
	if err := setReceiveBuffer(c, rcvbuf); err != nil {
		c.Close()
		return nil, err
	}
	for _, g := range []uint32{unix.NFNLGRP_CONNTRACK_NEW, unix.NFNLGRP_CONNTRACK_DESTROY} {
		if err := c.JoinGroup(g); err != nil {
			c.Close()
			return nil, fmt.Errorf("flowcap: join conntrack event group %d: %w", g, err)
		}
	}
	return &ctConn{c: c}, nil
}

// loadConntrack makes the kernel load nf_conntrack_netlink, and with it
// nf_conntrack, before nf_conntrack_acct is written: joining the event
// groups only asks for the module without waiting (request_module_nowait),
// while a request is held until the module is there. One request, in the
// calling thread's namespace.
func loadConntrack() error {
	c, err := conntrack.Dial(nil)
	if err != nil {
		return fmt.Errorf("flowcap: open conntrack netlink socket: %w", err)
	}
	defer c.Close()
	if _, err := c.StatsGlobal(); err != nil {
		return fmt.Errorf("flowcap: conntrack (is nf_conntrack available?): %w", err)
	}
	return nil
}

// setReceiveBuffer forces the buffer's size past rmem_max
// (SO_RCVBUFFORCE, root only), falling back to what rmem_max allows.
func setReceiveBuffer(c *netlink.Conn, n int) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("flowcap: receive buffer: %w", err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, n)
	}); err != nil {
		return fmt.Errorf("flowcap: receive buffer: %w", err)
	}
	if serr != nil {
		if err := c.SetReadBuffer(n); err != nil {
			return fmt.Errorf("flowcap: receive buffer of %d bytes: %w", n, err)
		}
	}
	return nil
}

// receive waits for the next events, or reports how many the kernel
// dropped (the socket's buffer overran; receive may be called again). A
// message that cannot be decoded is skipped. An error is the socket's
// (after close).
func (c *ctConn) receive() (evs []conntrack.Event, lost uint32, err error) {
	msgs, err := c.c.Receive()
	if errors.Is(err, unix.ENOBUFS) {
		return nil, c.lost(), nil
	}
	if err != nil {
		return nil, 0, err
	}
	evs = make([]conntrack.Event, 0, len(msgs))
	for _, m := range msgs {
		var ev conntrack.Event
		if err := ev.Unmarshal(m); err != nil || ev.Flow == nil {
			continue
		}
		evs = append(evs, ev)
	}
	return evs, 0, nil
}

func (c *ctConn) close() error { return c.c.Close() }

// lost returns how many events the kernel dropped since it was last
// called: the socket's drop count (SO_MEMINFO's SK_MEMINFO_DROPS, which
// netlink counts per message it could not queue), at least 1 when it
// cannot be read.
func (c *ctConn) lost() uint32 {
	const skMeminfoDrops = 8 // SK_MEMINFO_DROPS
	var mem [skMeminfoDrops + 1]uint32
	rc, err := c.c.SyscallConn()
	if err != nil {
		return 1
	}
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		n := uint32(unsafe.Sizeof(mem))
		_, _, errno = unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_MEMINFO,
			uintptr(unsafe.Pointer(&mem[0])), uintptr(unsafe.Pointer(&n)), 0)
	}); err != nil || errno != 0 {
		return 1
	}
	d := mem[skMeminfoDrops] - c.drops
	c.drops = mem[skMeminfoDrops]
	return max(d, 1)
}
