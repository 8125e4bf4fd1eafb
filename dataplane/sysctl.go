package dataplane

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Sysctl is one /proc/sys setting, Key relative to /proc/sys with '/'
// separators ("net/ipv4/conf/pn0123/proxy_arp"): interface names may
// contain dots, so the dotted form would be ambiguous.
type Sysctl struct {
	Key, Value string
}

func (s Sysctl) String() string { return s.Key + "=" + s.Value }

// procSys is /proc/sys; a variable only for tests without root.
var procSys = "/proc/sys"

// WriteSysctls writes every setting in the network namespace of the
// calling thread (net/ entries of /proc/sys follow the namespace of the
// thread that opens them): call it inside netns.Do for a container.
// A value already in place is not written again.
func WriteSysctls(list []Sysctl) error {
	for _, s := range list {
		if err := writeSysctl(s); err != nil {
			return err
		}
	}
	return nil
}

func writeSysctl(s Sysctl) error {
	p := filepath.Join(procSys, s.Key)
	f, err := os.OpenFile(p, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sysctl %s: %w", s.Key, err)
	}
	defer f.Close()
	var buf [32]byte
	n, _ := f.Read(buf[:])
	if string(bytes.TrimSpace(buf[:n])) == s.Value {
		return nil
	}
	if _, err := f.WriteAt([]byte(s.Value), 0); err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", s.Key, s.Value, err)
	}
	return nil
}

// ReadSysctl reads one setting in the calling thread's namespace.
func ReadSysctl(key string) (string, error) {
	b, err := os.ReadFile(filepath.Join(procSys, key))
	if err != nil {
		return "", fmt.Errorf("sysctl %s: %w", key, err)
	}
	return string(bytes.TrimSpace(b)), nil
}

// CheckSysctls returns one line per setting that is not as listed.
func CheckSysctls(list []Sysctl) []string {
	var diffs []string
	for _, s := range list {
		got, err := ReadSysctl(s.Key)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			diffs = append(diffs, fmt.Sprintf("sysctl %s does not exist", s.Key))
		case err != nil:
			diffs = append(diffs, err.Error())
		case got != s.Value:
			diffs = append(diffs, fmt.Sprintf("sysctl %s is %s, want %s", s.Key, got, s.Value))
		}
	}
	return diffs
}

// RoutedHostSysctls are the settings of a routed-mode host veth, as in
// Calico: answer ARP for the pod's gateway at once (proxy_arp,
// proxy_delay 0), forward, allow DNAT to 127.0.0.1 (route_localnet);
// for IPv6 proxy NDP, forward, ignore router advertisements, and no DAD
// on the host end's link-local address, the pod's IPv6 gateway.
func RoutedHostSysctls(name string, v4, v6 bool) []Sysctl {
	var out []Sysctl
	if v4 {
		out = append(out,
			Sysctl{"net/ipv4/conf/" + name + "/proxy_arp", "1"},
			Sysctl{"net/ipv4/neigh/" + name + "/proxy_delay", "0"},
			Sysctl{"net/ipv4/conf/" + name + "/forwarding", "1"},
			Sysctl{"net/ipv4/conf/" + name + "/route_localnet", "1"},
		)
	}
	if v6 {
		out = append(out, ipv6IfSysctls(name)...)
	}
	return out
}

// ipv6IfSysctls are a host-side interface's IPv6 settings: router, no
// RA, no DAD. accept_dad goes first so nothing after it waits for DAD.
func ipv6IfSysctls(name string) []Sysctl {
	return []Sysctl{
		{"net/ipv6/conf/" + name + "/accept_dad", "0"},
		{"net/ipv6/conf/" + name + "/accept_ra", "0"},
		{"net/ipv6/conf/" + name + "/proxy_ndp", "1"},
		{"net/ipv6/conf/" + name + "/forwarding", "1"},
	}
}

// BridgeSysctls are the settings of the bridge in bridge mode: it is the
// pods' router, so it forwards.
func BridgeSysctls(name string, v4, v6 bool) []Sysctl {
	var out []Sysctl
	if v4 {
		out = append(out, Sysctl{"net/ipv4/conf/" + name + "/forwarding", "1"})
	}
	if v6 {
		out = append(out,
			Sysctl{"net/ipv6/conf/" + name + "/accept_dad", "0"},
			Sysctl{"net/ipv6/conf/" + name + "/accept_ra", "0"},
			Sysctl{"net/ipv6/conf/" + name + "/forwarding", "1"},
		)
	}
	return out
}

// NodeForwardingSysctls are the namespace-wide forwarding switches a node
// needs to be its pods' gateway, per family. For IPv4 the kernel forwards
// a packet when the interface it arrived on forwards: the host veths are
// set per interface, but the replies to pod traffic that left the node
// arrive on the uplink, so a fresh host (ip_forward 0) would drop them.
// ip_forward turns every interface's forwarding on, as the reference ptp
// and bridge plugins and Calico's Felix do. For IPv6 the kernel forwards
// only when conf/all/forwarding is on; the per-interface value only marks
// the interface as a router. They are written only when off (WriteSysctls
// reads first, so a pod's ADD pays one read), and never undone: they are
// the node's settings, not the pod's.
func NodeForwardingSysctls(v4, v6 bool) []Sysctl {
	var out []Sysctl
	if v4 {
		out = append(out, Sysctl{"net/ipv4/ip_forward", "1"})
	}
	if v6 {
		out = append(out, Sysctl{"net/ipv6/conf/all/forwarding", "1"})
	}
	return out
}

// ContainerSysctls are the settings of the pod's interface: no DAD, so
// its link-local address is usable at once (its global addresses carry
// IFA_F_NODAD already), no router advertisements, and a link-local
// address derived from the MAC (EUI-64), whatever the namespace's
// default: the source guard knows it from the MAC alone
// (LinkLocalOf). Written before the link comes up, which is when the
// kernel makes the address.
func ContainerSysctls(ifName string, v6 bool) []Sysctl {
	if !v6 {
		return nil
	}
	return []Sysctl{
		{"net/ipv6/conf/" + ifName + "/addr_gen_mode", "0"},
		{"net/ipv6/conf/" + ifName + "/accept_dad", "0"},
		{"net/ipv6/conf/" + ifName + "/accept_ra", "0"},
	}
}

// BridgeNetfilterSysctls hand a bridge's IPv4 and IPv6 traffic to the inet hooks
// (br_netfilter's bridge-nf-call-iptables and -ip6tables, per network
// namespace), or stop doing so: NetworkPolicy's rules, in the inet
// family, then judge traffic between two pods of one bridge too, with
// conntrack. kube-proxy needs the same for Services on a bridge. It is
// node-wide: every bridge of the namespace hands its IP traffic over.
func BridgeNetfilterSysctls(on bool) []Sysctl {
	v := "0"
	if on {
		v = "1"
	}
	return []Sysctl{{"net/bridge/bridge-nf-call-iptables", v}, {"net/bridge/bridge-nf-call-ip6tables", v}}
}
