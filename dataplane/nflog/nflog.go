package nflog

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// nfnetlink_log's messages and configuration (linux/netfilter/nfnetlink_log.h).
const (
	subsysULOG = 4 // NFNL_SUBSYS_ULOG
	msgPacket  = 0 // NFULNL_MSG_PACKET
	msgConfig  = 1 // NFULNL_MSG_CONFIG

	cfgCmd     = 1 // NFULA_CFG_CMD: struct nfulnl_msg_config_cmd { u8 command }
	cfgMode    = 2 // NFULA_CFG_MODE: be32 copy_range, u8 copy_mode, u8 pad
	cfgTimeout = 4 // NFULA_CFG_TIMEOUT: be32, in 1/100 s
	cfgQThresh = 5 // NFULA_CFG_QTHRESH: be32

	cmdBind    = 1 // NFULNL_CFG_CMD_BIND
	copyPacket = 2 // NFULNL_COPY_PACKET
)

// CopyRange is how much of each packet the kernel copies: the largest
// IPv4 header (60 bytes) or an IPv6 header with a few extension headers,
// and the ports.
const CopyRange = 128

// Option configures Listen.
type Option func(*netlink.Config)

// WithNetNSFd listens in the network namespace of fd (an open
// /proc/<pid>/ns/net or /run/netns file) instead of the calling
// thread's. The caller may close fd once Listen returned.
func WithNetNSFd(fd int) Option { return func(c *netlink.Config) { c.NetNS = fd } }

// Conn is a socket bound to one NFLOG group.
type Conn struct {
	c     *netlink.Conn
	group uint16
}

// Listen binds group: from now on, the packets a rule logs to it come to
// this socket, each at once (no batching), copied up to CopyRange bytes.
// A group has one listener per namespace: binding one that another
// socket holds fails (EBUSY).
func Listen(group uint16, opts ...Option) (*Conn, error) {
	var cfg netlink.Config
	for _, o := range opts {
		o(&cfg)
	}
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, &cfg)
	if err != nil {
		return nil, fmt.Errorf("nflog: open netfilter netlink socket: %w", err)
	}
	// One message: the ack is its only answer, so no logged packet can
	// come between the request and the ack.
	ae := netlink.NewAttributeEncoder()
	ae.Bytes(cfgCmd, []byte{cmdBind})
	mode := make([]byte, 6)
	binary.BigEndian.PutUint32(mode, CopyRange)
	mode[4] = copyPacket
	ae.Bytes(cfgMode, mode)
	ae.Bytes(cfgQThresh, binary.BigEndian.AppendUint32(nil, 1))
	ae.Bytes(cfgTimeout, binary.BigEndian.AppendUint32(nil, 1))
	attrs, err := ae.Encode()
	if err != nil {
		c.Close()
		return nil, err
	}
	// nfgenmsg: AF_UNSPEC, NFNETLINK_V0, the group (big endian).
	hdr := []byte{unix.AF_UNSPEC, 0, byte(group >> 8), byte(group)}
	_, err = c.Execute(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(subsysULOG<<8 | msgConfig), Flags: netlink.Request | netlink.Acknowledge},
		Data:   append(hdr, attrs...),
	})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("nflog: bind group %d: %w", group, err)
	}
	return &Conn{c: c, group: group}, nil
}

// ErrLost says the socket's buffer overflowed: records were lost, and
// Receive may be called again.
var ErrLost = errors.New("nflog: records lost (socket buffer overrun)")

// Receive waits for the next records. A message that cannot be read is
// skipped; ErrLost says some were dropped by the kernel. Any other error
// is the socket's (net.ErrClosed-like after Close).
func (c *Conn) Receive() ([]Record, error) {
	msgs, err := c.c.Receive()
	if err != nil {
		if errors.Is(err, unix.ENOBUFS) {
			return nil, ErrLost
		}
		return nil, err
	}
	var out []Record
	for _, m := range msgs {
		if m.Header.Type != netlink.HeaderType(subsysULOG<<8|msgPacket) {
			continue
		}
		if r, err := parsePacket(m.Data); err == nil {
			out = append(out, r)
		}
	}
	return out, nil
}

// Close releases the group and the socket. It may be called while
// Receive waits, which then returns an error.
func (c *Conn) Close() error { return c.c.Close() }
