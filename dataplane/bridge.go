package dataplane

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
)

// Bridge describes the bridge of bridge mode.
type Bridge struct {
	Name    string
	MTU     int // 0: the kernel's default
	Promisc bool
}

// EnsureBridge returns the bridge, creating it (up) when it does not
// exist. Concurrent ADDs race to create it; the loser finds the
// winner's. A link of that name that is not a bridge is an error
// (of KindNotBridge), not something to delete. Returns the bridge's index
// and MAC.
func EnsureBridge(h *netlink.Handle, b Bridge) (*netlink.Bridge, error) {
	for attempt := 0; attempt < 3; attempt++ {
		link, err := LinkByName(h, b.Name)
		if err != nil {
			return nil, err
		}
		if link == nil {
			attrs := netlink.NewLinkAttrs()
			attrs.Name = b.Name
			attrs.MTU = b.MTU
			attrs.Flags = net.FlagUp
			// A MAC of its own: otherwise the bridge takes the lowest MAC
			// of its ports, and changes it as pods come and go.
			attrs.HardwareAddr = bridgeMAC(b.Name)
			err := h.LinkAdd(&netlink.Bridge{LinkAttrs: attrs})
			if isExist(err) && attempt == 0 {
				continue // created by a concurrent ADD: look again
			}
			if err != nil {
				return nil, fmt.Errorf("create bridge %s: %w", b.Name, err)
			}
			continue
		}
		br, ok := link.(*netlink.Bridge)
		if !ok {
			return nil, errorf(KindNotBridge, "%s exists and is a %s, not a bridge", b.Name, link.Type())
		}
		if err := configureBridge(h, br, b); err != nil {
			return nil, err
		}
		return br, nil
	}
	return nil, fmt.Errorf("bridge %s: created, but not found afterwards", b.Name)
}

// configureBridge applies MTU, promiscuity and up to an existing bridge,
// touching only what differs.
func configureBridge(h *netlink.Handle, br *netlink.Bridge, b Bridge) error {
	a := br.Attrs()
	if b.MTU > 0 && a.MTU != b.MTU {
		if err := h.LinkSetMTU(br, b.MTU); err != nil {
			return fmt.Errorf("set MTU of bridge %s: %w", b.Name, err)
		}
	}
	if b.Promisc && a.Promisc == 0 {
		if err := h.SetPromiscOn(br); err != nil {
			return fmt.Errorf("set bridge %s promiscuous: %w", b.Name, err)
		}
	}
	if a.Flags&net.FlagUp == 0 {
		if err := h.LinkSetUp(br); err != nil {
			return fmt.Errorf("set bridge %s up: %w", b.Name, err)
		}
	}
	return nil
}

// bridgeMAC derives a stable, locally administered MAC from the name.
func bridgeMAC(name string) net.HardwareAddr {
	m, _ := AttachmentMACs("bridge", name)
	return m
}

// SetMaster enslaves the link with index to the bridge.
func SetMaster(h *netlink.Handle, index, bridgeIndex int) error {
	if err := h.LinkSetMasterByIndex(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: index}}, bridgeIndex); err != nil {
		return fmt.Errorf("attach link %d to bridge %d: %w", index, bridgeIndex, err)
	}
	return nil
}

// SetHairpin turns hairpin mode on for the bridge port with index, so a
// pod can reach itself through a service address that NATs back to it.
func SetHairpin(h *netlink.Handle, index int) error {
	if err := h.LinkSetHairpin(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: index}}, true); err != nil {
		return fmt.Errorf("set hairpin on bridge port %d: %w", index, err)
	}
	return nil
}

// Hairpin reports whether hairpin mode is on for the port with index.
func Hairpin(h *netlink.Handle, index int) (bool, error) {
	info, err := h.LinkGetProtinfo(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: index}})
	if err != nil {
		return false, fmt.Errorf("read bridge port %d: %w", index, err)
	}
	return info.Hairpin, nil
}
