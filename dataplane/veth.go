package dataplane

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
)

// Veth describes a veth pair to create from the host namespace with the
// peer directly in the container's: no link ever moves between
// namespaces (a move costs an RCU grace period, ~16 ms here).
type Veth struct {
	HostName  string
	HostMAC   net.HardwareAddr
	HostAlias string // see tag.Owner.Alias
	PeerName  string // CNI_IFNAME
	PeerMAC   net.HardwareAddr
	// PeerNSFd is an open descriptor of the container's namespace.
	PeerNSFd int
	MTU      int // 0: the kernel's default
}

// CreateVeth creates the pair through h, a handle in the host namespace.
// The host end is created up: without a carrier (the peer is still down)
// the kernel does no IPv6 autoconfiguration yet, so sysctls written
// before the peer goes up still apply. It returns the host end's index, also with an error when the pair
// exists but could not be finished, so that the caller can remove it.
//
// A name already taken in either namespace is an error of KindConflict:
// ADD decides beforehand whether an existing link is its own.
func CreateVeth(h *netlink.Handle, v Veth) (int, error) {
	attrs := netlink.NewLinkAttrs()
	attrs.Name = v.HostName
	attrs.HardwareAddr = v.HostMAC
	attrs.MTU = v.MTU
	attrs.Flags = net.FlagUp
	// One queue each way, said at creation (the peer inherits it): left
	// to the kernel, a veth gets one per CPU and is then cut to one real
	// queue once registered, which waits for an expedited RCU grace
	// period while holding the rtnl lock (~1.8 ms here), so every other
	// ADD and DEL on the node waits too. The pair ends with one real
	// queue either way.
	attrs.NumTxQueues, attrs.NumRxQueues = 1, 1
	link := &netlink.Veth{
		LinkAttrs:        attrs,
		PeerName:         v.PeerName,
		PeerHardwareAddr: v.PeerMAC,
		PeerNamespace:    netlink.NsFd(v.PeerNSFd),
	}
	if err := h.LinkAdd(link); err != nil {
		if isExist(err) {
			return 0, errorf(KindConflict, "cannot create veth %s with peer %s: a link of one of these names already exists", v.HostName, v.PeerName)
		}
		return 0, fmt.Errorf("create veth %s (peer %s): %w", v.HostName, v.PeerName, err)
	}
	if link.Index == 0 {
		return 0, fmt.Errorf("create veth %s: the kernel did not report its index", v.HostName)
	}
	// The kernel ignores IFLA_IFALIAS when it creates a link.
	if v.HostAlias != "" {
		if err := h.LinkSetAlias(link, v.HostAlias); err != nil {
			return link.Index, fmt.Errorf("set alias of %s: %w", v.HostName, err)
		}
	}
	return link.Index, nil
}

// DeleteLink deletes the link called name; deleting either end of a veth
// deletes the pair. A link that does not exist is not an error.
func DeleteLink(h *netlink.Handle, name string) error {
	link, err := h.LinkByName(name)
	if IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("find link %s: %w", name, err)
	}
	if err := h.LinkDel(link); err != nil && !IsNotFound(err) {
		return fmt.Errorf("delete link %s: %w", name, err)
	}
	return nil
}

// LinkByName returns the link called name, or nil when there is none.
func LinkByName(h *netlink.Handle, name string) (netlink.Link, error) {
	link, err := h.LinkByName(name)
	if IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("find link %s: %w", name, err)
	}
	return link, nil
}

// IsPeerOf reports whether the container link c is the other end of the
// host veth host: each names the other's index as its peer. Indexes are
// per namespace, so both directions are checked.
func IsPeerOf(host, c netlink.Link) bool {
	hv, ok1 := host.(*netlink.Veth)
	cv, ok2 := c.(*netlink.Veth)
	if !ok1 || !ok2 {
		return false
	}
	return hv.Attrs().ParentIndex == cv.Attrs().Index && cv.Attrs().ParentIndex == hv.Attrs().Index
}

// SetUp brings the link with index up.
func SetUp(h *netlink.Handle, index int) error {
	if err := h.LinkSetUp(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: index}}); err != nil {
		return fmt.Errorf("set link %d up: %w", index, err)
	}
	return nil
}
