package flowcap

import (
	"errors"
	"fmt"

	"github.com/mdlayher/netlink"
	"github.com/ti-mo/conntrack"
	"golang.org/x/sys/unix"
)

// ReceiveBuffer is the size of the capture sockets' receive buffers:
// about 10,000 conntrack events (~400 bytes each) queued while the agent
// is not scheduled. It is forced past net.core.rmem_max (the agent is
// privileged).
const ReceiveBuffer = 4 << 20

// errLost says the kernel dropped events: the socket's buffer overran.
var errLost = errors.New("flowcap: events lost (socket buffer overrun)")

// ctConn is a socket joined to ctnetlink's NEW and DESTROY groups.
// ti-mo/conntrack's Conn.Listen ends its worker at the first receive
// error, ENOBUFS included; the capture must count a loss and go on, so
// it reads the socket itself and uses the library to decode each event.
type ctConn struct {
	c *netlink.Conn
}

// listenConntrack opens the socket in the calling thread's network
// namespace.
func listenConntrack() (*ctConn, error) {
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return nil, fmt.Errorf("flowcap: open netfilter netlink socket: %w", err)
	}
	if err := setReceiveBuffer(c, ReceiveBuffer); err != nil {
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

// receive waits for the next events. errLost says the kernel dropped
// some (receive may be called again); a message that cannot be decoded
// is skipped. Any other error is the socket's (after close).
func (c *ctConn) receive() ([]conntrack.Event, error) {
	msgs, err := c.c.Receive()
	if err != nil {
		if errors.Is(err, unix.ENOBUFS) {
			return nil, errLost
		}
		return nil, err
	}
	evs := make([]conntrack.Event, 0, len(msgs))
	for _, m := range msgs {
		var ev conntrack.Event
		if err := ev.Unmarshal(m); err != nil || ev.Flow == nil {
			continue
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

func (c *ctConn) close() error { return c.c.Close() }
