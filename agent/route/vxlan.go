package route

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/dataplane"
)

// The VXLAN device every node makes in vxlan and auto modes.
const (
	VXLANDevice = "podnet.vxlan"
	// WireGuardDevice is the device of encrypted routes (agent/wireguard
	// makes it).
	WireGuardDevice = "podnet.wg"
	VXLANVNI        = 4097
	VXLANPort       = 4789
)

func (p *Programmer) vxlanWant() *netlink.Vxlan {
	// The pods' MTU in vxlan and auto modes (PodMTU): what fits the
	// underlay once encapsulated.
	mtu := 0
	if overhead := vxlanOverhead(p.UnderlayAddr.Is6()); p.UnderlayMTU > overhead {
		mtu = p.UnderlayMTU - overhead
	}
	return &netlink.Vxlan{
		LinkAttrs:    netlink.LinkAttrs{Name: VXLANDevice, HardwareAddr: p.VTEPMAC, MTU: mtu},
		VxlanId:      VXLANVNI,
		VtepDevIndex: p.UnderlayIndex,
		SrcAddr:      p.UnderlayAddr.AsSlice(),
		Port:         VXLANPort,
		// Every remote MAC is in the FDB, put there by the agent; nothing
		// is learned from traffic.
		Learning: false,
	}
}

// vxlanCurrent reports whether an existing device is configured as want.
func vxlanCurrent(got *netlink.Vxlan, want *netlink.Vxlan) bool {
	return got.VxlanId == want.VxlanId && got.Port == want.Port && got.VtepDevIndex == want.VtepDevIndex &&
		got.SrcAddr.Equal(want.SrcAddr) && !got.Learning &&
		bytes.Equal(got.HardwareAddr, want.HardwareAddr) && (want.MTU == 0 || got.MTU == want.MTU)
}

// ensureVXLAN creates podnet.vxlan, or recreates it when its settings
// are not what this node needs (the underlay address changed), brings it
// up, enables forwarding on it, and returns its index.
func (p *Programmer) ensureVXLAN() (int, error) {
	want := p.vxlanWant()
	l, err := p.h.LinkByName(VXLANDevice)
	switch {
	case err == nil:
		if got, ok := l.(*netlink.Vxlan); ok && vxlanCurrent(got, want) {
			if got.OperState != netlink.OperUp && got.Flags&net.FlagUp == 0 {
				if err := p.h.LinkSetUp(l); err != nil {
					return 0, fmt.Errorf("set %s up: %w", VXLANDevice, err)
				}
			}
			return got.Index, nil
		}
		p.log.Info("recreating VXLAN device with new settings", "device", VXLANDevice)
		if err := p.h.LinkDel(l); err != nil && !dataplane.IsNotFound(err) {
			return 0, fmt.Errorf("delete %s: %w", VXLANDevice, err)
		}
	case !dataplane.IsNotFound(err):
		return 0, fmt.Errorf("find %s: %w", VXLANDevice, err)
	}
	if err := p.h.LinkAdd(want); err != nil {
		return 0, fmt.Errorf("create %s (vni %d, port %d, local %s): %w", VXLANDevice, VXLANVNI, VXLANPort, p.UnderlayAddr, err)
	}
	l, err = p.h.LinkByName(VXLANDevice)
	if err != nil {
		return 0, fmt.Errorf("find %s after creating it: %w", VXLANDevice, err)
	}
	if err := p.h.LinkSetUp(l); err != nil {
		return 0, fmt.Errorf("set %s up: %w", VXLANDevice, err)
	}
	if p.sysctl != nil {
		// Decapsulated packets arrive on the device and are forwarded to
		// the pods' veths.
		err := p.sysctl([]dataplane.Sysctl{{Key: "net/ipv4/conf/" + VXLANDevice + "/forwarding", Value: "1"}})
		if err != nil {
			return 0, err
		}
	}
	return l.Attrs().Index, nil
}

// deleteVXLAN removes podnet.vxlan (host-gw mode), which takes its
// routes, neighbours and FDB entries with it.
func (p *Programmer) deleteVXLAN() error {
	l, err := p.h.LinkByName(VXLANDevice)
	if dataplane.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("find %s: %w", VXLANDevice, err)
	}
	if err := p.h.LinkDel(l); err != nil && !dataplane.IsNotFound(err) {
		return fmt.Errorf("delete %s: %w", VXLANDevice, err)
	}
	return nil
}

// syncPeers adds (add) or removes (!add) the neighbour and FDB entries on
// podnet.vxlan so that they match peers. Every entry on the device is the
// agent's.
func (p *Programmer) syncPeers(index int, peers []Peer, add bool) error {
	want := peerEntries(peers)
	neighs, fdb, err := p.listVXLANEntries(index)
	if err != nil {
		return err
	}
	if add {
		return p.addPeerEntries(index, want, neighs, fdb)
	}
	return p.delStaleEntries(want, neighs, fdb)
}

// vxlanEntries are neighbour (VTEP address to MAC) and FDB (MAC to
// underlay address) entries of podnet.vxlan.
type vxlanEntries struct {
	neigh map[netip.Addr]string
	fdb   map[string]netip.Addr
}

// peerEntries are the entries that reach peers. A peer with an
// unreadable MAC gets none.
func peerEntries(peers []Peer) vxlanEntries {
	want := vxlanEntries{neigh: map[netip.Addr]string{}, fdb: map[string]netip.Addr{}}
	for _, peer := range peers {
		mac, err := net.ParseMAC(peer.MAC)
		if err != nil {
			continue
		}
		want.neigh[peer.VTEPIP] = mac.String()
		if peer.VTEPIP6.IsValid() {
			want.neigh[peer.VTEPIP6] = mac.String()
		}
		want.fdb[mac.String()] = peer.Underlay
	}
	return want
}

// listVXLANEntries lists the neighbours (IPv4 and, where the kernel has
// it, IPv6) and the FDB of podnet.vxlan.
func (p *Programmer) listVXLANEntries(index int) (neighs, fdb []netlink.Neigh, err error) {
	neighs, err = p.h.NeighList(index, netlink.FAMILY_V4)
	if err != nil {
		return nil, nil, fmt.Errorf("list neighbours of %s: %w", VXLANDevice, err)
	}
	neighs6, err := p.h.NeighList(index, netlink.FAMILY_V6)
	if err != nil && !errors.Is(err, unix.EAFNOSUPPORT) {
		return nil, nil, fmt.Errorf("list IPv6 neighbours of %s: %w", VXLANDevice, err)
	}
	fdb, err = p.h.NeighList(index, unix.AF_BRIDGE)
	if err != nil {
		return nil, nil, fmt.Errorf("list FDB of %s: %w", VXLANDevice, err)
	}
	return append(neighs, neighs6...), fdb, nil
}

// addPeerEntries sets every wanted entry that is missing or different:
// FDB entries first, then permanent neighbours.
func (p *Programmer) addPeerEntries(index int, want vxlanEntries, neighs, fdb []netlink.Neigh) error {
	haveNeigh := map[netip.Addr]string{}
	for _, n := range neighs {
		ip, _ := netip.AddrFromSlice(n.IP)
		if n.State&netlink.NUD_PERMANENT != 0 {
			haveNeigh[ip.Unmap()] = n.HardwareAddr.String()
		}
	}
	haveFDB := map[string]netip.Addr{}
	for _, n := range fdb {
		ip, _ := netip.AddrFromSlice(n.IP)
		haveFDB[n.HardwareAddr.String()] = ip.Unmap()
	}
	var errs []error
	for mac, dst := range want.fdb {
		if haveFDB[mac] == dst {
			continue
		}
		hw, _ := net.ParseMAC(mac)
		e := &netlink.Neigh{LinkIndex: index, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF,
			State: netlink.NUD_PERMANENT, HardwareAddr: hw, IP: dst.AsSlice()}
		if err := p.h.NeighSet(e); err != nil {
			errs = append(errs, fmt.Errorf("set FDB %s dst %s on %s: %w", mac, dst, VXLANDevice, err))
		}
	}
	for ip, mac := range want.neigh {
		if haveNeigh[ip] == mac {
			continue
		}
		hw, _ := net.ParseMAC(mac)
		family := netlink.FAMILY_V4
		if ip.Is6() {
			family = netlink.FAMILY_V6
		}
		e := &netlink.Neigh{LinkIndex: index, Family: family, State: netlink.NUD_PERMANENT,
			IP: ip.AsSlice(), HardwareAddr: hw}
		if err := p.h.NeighSet(e); err != nil {
			errs = append(errs, fmt.Errorf("set neighbour %s lladdr %s on %s: %w", ip, mac, VXLANDevice, err))
		}
	}
	return errors.Join(errs...)
}

// delStaleEntries deletes every neighbour and FDB entry that is not
// wanted as it is.
func (p *Programmer) delStaleEntries(want vxlanEntries, neighs, fdb []netlink.Neigh) error {
	var errs []error
	for _, n := range neighs {
		ip, _ := netip.AddrFromSlice(n.IP)
		if mac, ok := want.neigh[ip.Unmap()]; ok && mac == n.HardwareAddr.String() {
			continue
		}
		if err := p.h.NeighDel(&n); err != nil && !dataplane.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete neighbour %s on %s: %w", ip, VXLANDevice, err))
		}
	}
	for _, n := range fdb {
		ip, _ := netip.AddrFromSlice(n.IP)
		if dst, ok := want.fdb[n.HardwareAddr.String()]; ok && dst == ip.Unmap() {
			continue
		}
		n.Flags |= netlink.NTF_SELF
		if err := p.h.NeighDel(&n); err != nil && !dataplane.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete FDB %s on %s: %w", n.HardwareAddr, VXLANDevice, err))
		}
	}
	return errors.Join(errs...)
}
