package loif

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// Name is the loopback interface's name.
const Name = "lo"

// withSocket runs fn with a datagram socket for interface ioctls.
func withSocket(fn func(fd int) error) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return fn(fd)
}

func flags(fd int) (uint16, error) {
	ifr, err := unix.NewIfreq(Name)
	if err != nil {
		return 0, err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return 0, fmt.Errorf("read the flags of %s: %w", Name, err)
	}
	return ifr.Uint16(), nil
}

// IsUp reports whether lo is up.
func IsUp() (up bool, err error) {
	err = withSocket(func(fd int) error {
		f, err := flags(fd)
		up = f&unix.IFF_UP != 0
		return err
	})
	return up, err
}

// SetUp brings lo up (up) or down; it does nothing when lo already is.
func SetUp(up bool) error {
	return withSocket(func(fd int) error {
		f, err := flags(fd)
		if err != nil {
			return err
		}
		want := f &^ unix.IFF_UP
		if up {
			want |= unix.IFF_UP
		}
		if want == f {
			return nil
		}
		ifr, err := unix.NewIfreq(Name)
		if err != nil {
			return err
		}
		ifr.SetUint16(want)
		if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
			return fmt.Errorf("set %s %s: %w", Name, map[bool]string{true: "up", false: "down"}[up], err)
		}
		return nil
	})
}

// Addrs lists lo's addresses, IPv4 first, in the kernel's order within
// each family.
func Addrs() ([]netip.Prefix, error) {
	var index uint32
	err := withSocket(func(fd int) error {
		ifr, err := unix.NewIfreq(Name)
		if err != nil {
			return err
		}
		if err := unix.IoctlIfreq(fd, unix.SIOCGIFINDEX, ifr); err != nil {
			return err
		}
		index = ifr.Uint32()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("find %s: %w", Name, err)
	}
	rib, err := syscall.NetlinkRIB(syscall.RTM_GETADDR, syscall.AF_UNSPEC)
	if err != nil {
		return nil, fmt.Errorf("list addresses of %s: %w", Name, err)
	}
	return parseAddrs(rib, index)
}

// parseAddrs picks the addresses of interface index out of an
// RTM_GETADDR dump.
func parseAddrs(rib []byte, index uint32) ([]netip.Prefix, error) {
	msgs, err := syscall.ParseNetlinkMessage(rib)
	if err != nil {
		return nil, fmt.Errorf("parse the address dump: %w", err)
	}
	var v4, v6 []netip.Prefix
	for i := range msgs {
		m := &msgs[i]
		if m.Header.Type != syscall.RTM_NEWADDR || len(m.Data) < syscall.SizeofIfAddrmsg {
			continue
		}
		// IfAddrmsg: family, prefixlen, flags, scope (one byte each),
		// then the interface index.
		family, bits := m.Data[0], int(m.Data[1])
		if idx := binary.NativeEndian.Uint32(m.Data[4:8]); idx != index {
			continue
		}
		attrs, err := syscall.ParseNetlinkRouteAttr(m)
		if err != nil {
			return nil, fmt.Errorf("parse an address of %s: %w", Name, err)
		}
		var addr netip.Addr
		for _, a := range attrs {
			// IFA_LOCAL is the interface's own address where it differs
			// from IFA_ADDRESS (point-to-point); lo has only IFA_ADDRESS.
			if a.Attr.Type == syscall.IFA_LOCAL || (a.Attr.Type == syscall.IFA_ADDRESS && !addr.IsValid()) {
				if ip, ok := netip.AddrFromSlice(a.Value); ok {
					addr = ip
				}
			}
		}
		if !addr.IsValid() {
			continue
		}
		p := netip.PrefixFrom(addr, bits)
		if family == syscall.AF_INET {
			v4 = append(v4, p)
		} else {
			v6 = append(v6, p)
		}
	}
	return append(v4, v6...), nil
}
