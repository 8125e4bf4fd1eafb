package dataplane

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// NewHandle opens a rtnetlink handle in the calling thread's network
// namespace. The socket stays bound to that namespace whichever thread
// uses it later, so one handle created inside netns.Do serves all the
// work in that namespace. Only NETLINK_ROUTE: the library's default also
// opens XFRM and NETFILTER sockets that podnet never uses.
func NewHandle() (*netlink.Handle, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("open rtnetlink socket: %w", err)
	}
	return h, nil
}

// IsNotFound reports whether err says that a link, address, route or
// neighbour does not exist.
func IsNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOENT) ||
		errors.Is(err, unix.ESRCH) || errors.Is(err, unix.EADDRNOTAVAIL)
}

// isExist reports whether err is EEXIST.
func isExist(err error) bool { return errors.Is(err, unix.EEXIST) }
