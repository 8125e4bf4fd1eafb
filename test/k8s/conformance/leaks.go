package conformance

import (
	"bytes"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
)

// leakTable is the nftables table that counts, on the harness's underlay
// switch, what nodes send towards addresses outside the harness.
const leakTable = "podnet_conformance_leaks"

// leakRules watch every frame the switch forwards between nodes: an IPv4
// packet to an address outside the harness's ranges (the underlay
// 198.18.0.0/24, the pod network 10.244.0.0/16, which host-gw routes over
// the underlay, and the Service range 10.96.0.0/24), an IPv6 packet to
// anything but link-local and multicast, and an ARP request for an
// address outside those ranges (a node's default route has no gateway, so
// a packet to the Internet would show as one). Each counted destination is
// kept in a set, for the report to name.
const leakRules = `table bridge ` + leakTable + ` {
	counter outside_ipv4 {}
	counter outside_ipv6 {}
	counter outside_arp {}
	set seen_ipv4 { type ipv4_addr; size 4096; flags dynamic; }
	set seen_ipv6 { type ipv6_addr; size 4096; flags dynamic; }
	set seen_arp { type ipv4_addr; size 4096; flags dynamic; }
	chain forward {
		type filter hook forward priority 0; policy accept;
		ip daddr != { 198.18.0.0/24, 10.244.0.0/16, 10.96.0.0/24 } add @seen_ipv4 { ip daddr } counter name outside_ipv4
		ip6 daddr != { fe80::/10, ff00::/8 } add @seen_ipv6 { ip6 daddr } counter name outside_ipv6
		arp operation request arp daddr ip != { 198.18.0.0/24, 10.244.0.0/16, 10.96.0.0/24 } add @seen_arp { arp daddr ip } counter name outside_arp
	}
}
`

// Leaks are the counters' packets: what reached the underlay addressed
// outside the harness; Seen is the table as nft lists it, with the
// destinations.
type Leaks struct {
	IPv4, IPv6, ARP uint64
	Seen            string
}

// Total is every counted packet.
func (l Leaks) Total() uint64 { return l.IPv4 + l.IPv6 + l.ARP }

func (l Leaks) String() string {
	s := fmt.Sprintf("%d IPv4 packets, %d IPv6 packets and %d ARP requests addressed outside the harness", l.IPv4, l.IPv6, l.ARP)
	if l.Total() > 0 {
		s += ":\n" + l.Seen
	}
	return s
}

// WatchLeaks installs the counters in the switch's network namespace
// (a name); they go with it.
func WatchLeaks(netnsName string) error {
	cmd := exec.Command("ip", "netns", "exec", netnsName, "nft", "-f", "-")
	cmd.Stdin = bytes.NewBufferString(leakRules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft in %s: %w\n%s", netnsName, err, out)
	}
	return nil
}

// ReadLeaks reads the counters WatchLeaks installed.
func ReadLeaks(netnsName string) (Leaks, error) {
	out, err := exec.Command("ip", "netns", "exec", netnsName, "nft", "list", "table", "bridge", leakTable).CombinedOutput()
	if err != nil {
		return Leaks{}, fmt.Errorf("nft list table in %s: %w\n%s", netnsName, err, out)
	}
	return parseLeaks(out)
}

var counterLine = regexp.MustCompile(`counter (outside_ipv4|outside_ipv6|outside_arp) \{\s*packets (\d+) bytes \d+`)

// parseLeaks reads the named counters' packets from `nft list table`.
func parseLeaks(out []byte) (Leaks, error) {
	var l Leaks
	found := 0
	for _, m := range counterLine.FindAllSubmatch(out, -1) {
		n, err := strconv.ParseUint(string(m[2]), 10, 64)
		if err != nil {
			return l, err
		}
		switch string(m[1]) {
		case "outside_ipv4":
			l.IPv4 = n
		case "outside_ipv6":
			l.IPv6 = n
		case "outside_arp":
			l.ARP = n
		}
		found++
	}
	if found != 3 {
		return l, fmt.Errorf("found %d of the 3 leak counters in:\n%s", found, out)
	}
	l.Seen = string(out)
	return l, nil
}
