package flowui

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// LoopbackAddr parses addr (host:port) and accepts it only when host is
// a loopback address, 127.0.0.0/8 or ::1: the page shows every flow the
// agents hold and has no login. A name (even localhost) is refused,
// since what it resolves to is not the address's own business.
func LoopbackAddr(addr string) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("want host:port, e.g. 127.0.0.1:7380: %w", err)
	}
	if host == "" {
		return netip.AddrPort{}, fmt.Errorf("no host: the page listens on a loopback address only (127.0.0.0/8 or ::1)")
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("host %q is not an IP address: the page listens on a loopback address only (127.0.0.0/8 or ::1)", host)
	}
	if ip.Zone() != "" || !ip.Unmap().IsLoopback() {
		return netip.AddrPort{}, fmt.Errorf("%s is not a loopback address: the page listens on 127.0.0.0/8 or ::1 only", ip)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("port %q: want a number 0-65535", port)
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(p)), nil
}

// loopbackHost is whether a request's Host header names the page the way
// a browser on this machine does: a loopback address or localhost, with
// or without a port. A DNS-rebinding page of another site sends its own
// name.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
