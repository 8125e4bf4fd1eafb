package nftelem

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/dataplane/nftlayout"
)

// perExchange bounds the keys of one exchange, so that the answers (a
// few hundred bytes each) always fit the socket's receive buffer: the
// kernel answers while the write is still in progress, and drops what
// does not fit.
const perExchange = 64

// answerTimeout bounds the wait for the kernel's answers, which it
// queues before the write returns: only a broken socket waits this long.
const answerTimeout = 10 * time.Second

// Conn gets elements over a netfilter netlink socket, bound to the
// network namespace it was opened in. It is not safe for concurrent use,
// nor for use alongside another user of the same socket.
type Conn struct {
	nl  *netlink.Conn
	own bool
}

// On gets elements over nl, a socket the caller owns (Close leaves it
// open), typically a google/nftables lasting connection's.
func On(nl *netlink.Conn) *Conn { return &Conn{nl: nl} }

// Dial opens a socket of its own in the calling thread's network
// namespace.
func Dial() (*Conn, error) {
	nl, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return nil, fmt.Errorf("nftelem: nftables netlink socket: %w", err)
	}
	return &Conn{nl: nl, own: true}, nil
}

// Lasting opens a google/nftables lasting connection with opts, and a
// Conn on the same socket: elements can then be got and changed without
// a second socket.
func Lasting(opts ...nftables.ConnOption) (*nftables.Conn, *Conn, error) {
	var nl *netlink.Conn
	capture := nftables.WithSockOptions(func(c *netlink.Conn) error { nl = c; return nil })
	all := append(append([]nftables.ConnOption{}, opts...), nftables.AsLasting(), capture)
	c, err := nftables.New(all...)
	if err != nil {
		return nil, nil, err
	}
	if nl == nil {
		_ = c.CloseLasting()
		return nil, nil, errors.New("nftelem: google/nftables opened no socket")
	}
	return c, On(nl), nil
}

// Close closes the socket if Dial opened it.
func (c *Conn) Close() error {
	if !c.own {
		return nil
	}
	return c.nl.Close()
}

// Get looks up the elements qs name in table t, one result per query in
// order. A missing key is a result (NotFound), not an error, and so is a
// missing set or table (NoSet). It costs one round trip per 64 queries.
func (c *Conn) Get(t *nftables.Table, qs []Query) ([]Result, error) {
	out := make([]Result, 0, len(qs))
	for len(qs) > 0 {
		n := min(len(qs), perExchange)
		rs, err := c.get(t, qs[:n])
		if err != nil {
			return nil, err
		}
		out = append(out, rs...)
		qs = qs[n:]
	}
	return out, nil
}

// get is one exchange: a probe per set, then a request per key, in one
// write.
func (c *Conn) get(t *nftables.Table, qs []Query) ([]Result, error) {
	probeOf := map[string]int{}
	var msgs []netlink.Message
	for _, q := range qs {
		if _, ok := probeOf[q.Set]; ok {
			continue
		}
		probeOf[q.Set] = len(msgs)
		m, err := getSetRequest(t, q.Set)
		if err != nil {
			return nil, fmt.Errorf("nftelem: encode a request for set %s: %w", q.Set, err)
		}
		msgs = append(msgs, m)
	}
	probes := len(msgs)
	for _, q := range qs {
		m, err := getElemRequest(t, q.Set, q.Key)
		if err != nil {
			return nil, fmt.Errorf("%s: encode: %w", where(t, q), err)
		}
		msgs = append(msgs, m)
	}
	answers, err := c.exchange(msgs)
	if err != nil {
		return nil, fmt.Errorf("nftelem: get elements of table %s: %w", nftlayout.Name(t), err)
	}
	return interpret(t, qs, probeOf, answers[:probes], answers[probes:])
}

// exchange sends msgs in one write and reads until every one of them is
// answered, so that nothing of this exchange is left on the socket for
// its next user.
func (c *Conn) exchange(msgs []netlink.Message) ([]answer, error) {
	sent, err := c.nl.SendMessages(msgs)
	if err != nil {
		return nil, err
	}
	bySeq := make(map[uint32]int, len(sent))
	for i, m := range sent {
		bySeq[m.Header.Sequence] = i
	}
	if err := c.nl.SetReadDeadline(time.Now().Add(answerTimeout)); err != nil {
		return nil, err
	}
	defer func() { _ = c.nl.SetReadDeadline(time.Time{}) }()
	answers := make([]answer, len(msgs))
	buf := make([]byte, 32<<10)
	for left := len(msgs); left > 0; {
		ms, err := c.receive(buf)
		if err != nil {
			return nil, err
		}
		n, err := absorb(answers, bySeq, ms)
		if err != nil {
			return nil, err
		}
		left -= n
	}
	return answers, nil
}

// receive reads one datagram. Not through netlink.Conn.Receive, which
// turns any error message into an error for the whole read and drops its
// sequence number: here an ENOENT is an answer like any other.
func (c *Conn) receive(buf []byte) ([]syscall.NetlinkMessage, error) {
	rc, err := c.nl.SyscallConn()
	if err != nil {
		return nil, err
	}
	var n, flags int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		for {
			n, _, flags, _, rerr = unix.Recvmsg(int(fd), buf, nil, unix.MSG_DONTWAIT)
			if rerr != unix.EINTR {
				return rerr != unix.EAGAIN // EAGAIN: wait for the poller
			}
		}
	})
	if err != nil {
		return nil, err
	}
	if rerr != nil {
		return nil, os.NewSyscallError("recvmsg", rerr)
	}
	if flags&unix.MSG_TRUNC != 0 {
		return nil, fmt.Errorf("an answer of more than %d bytes", len(buf))
	}
	return syscall.ParseNetlinkMessage(buf[:n])
}
