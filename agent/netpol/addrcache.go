package netpol

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// addrCache holds the node's global addresses (globalAddrs) between
// changes: every rebuild needs them, and listing them is an rtnetlink
// dump, which waits for the rtnl lock behind the node's CNI ADDs and DELs
// (their veth creations and deletions hold it for milliseconds). A
// socket subscribed to the address groups marks the list stale when the
// kernel announces a change of a global address (a pod's host veth gets
// only link-local ones), or when notices were lost; the next rebuild
// lists again.
type addrCache struct {
	h     *netlink.Handle
	f     *os.File
	stale atomic.Bool

	mu    sync.Mutex
	addrs []netip.Addr // nil: never listed
}

// newAddrCache subscribes in the calling thread's namespace, which must
// be h's.
func newAddrCache(h *netlink.Handle) (*addrCache, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("address watch socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: unix.RTMGRP_IPV4_IFADDR | unix.RTMGRP_IPV6_IFADDR}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("address watch bind: %w", err)
	}
	// Through the runtime poller: close ends a read in progress.
	c := &addrCache{h: h, f: os.NewFile(uintptr(fd), "rtnetlink-addr-watch")}
	go c.watch()
	return c, nil
}

// get returns the addresses, listed again if they may have changed.
func (c *addrCache) get() ([]netip.Addr, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Cleared before the dump: a change announced meanwhile marks the
	// list stale again.
	if c.addrs != nil && !c.stale.Swap(false) {
		return c.addrs, nil
	}
	as, err := globalAddrs(c.h)
	if err != nil {
		c.stale.Store(true)
		return nil, err
	}
	c.addrs = append(make([]netip.Addr, 0, len(as)), as...)
	return c.addrs, nil
}

func (c *addrCache) close() { c.f.Close() }

func (c *addrCache) watch() {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.f.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			c.stale.Store(true) // ENOBUFS: notices lost
			continue
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			c.stale.Store(true)
			continue
		}
		for _, m := range msgs {
			if globalAddrChange(m) {
				c.stale.Store(true)
			}
		}
	}
}

// globalAddrChange reports whether m announces a global address's
// arrival or departure (struct ifaddrmsg: family, prefixlen, flags,
// scope, index).
func globalAddrChange(m syscall.NetlinkMessage) bool {
	if m.Header.Type != unix.RTM_NEWADDR && m.Header.Type != unix.RTM_DELADDR {
		return false
	}
	if len(m.Data) < unix.SizeofIfAddrmsg {
		return true // cannot tell
	}
	return m.Data[3] == unix.RT_SCOPE_UNIVERSE
}
