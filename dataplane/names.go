package dataplane

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
)

// HostVethPrefix starts the name of every host-side veth podnet creates.
const HostVethPrefix = "pn"

// hostVethHashLen is what is left of IFNAMSIZ-1 after the prefix.
const hostVethHashLen = 15 - len(HostVethPrefix)

// attachmentHash is the digest every deterministic name and address of
// an attachment derives from. The separator keeps ("ab","c") and
// ("a","bc") apart; a container ID never contains '/'.
func attachmentHash(containerID, ifName string) [sha256.Size]byte {
	return sha256.Sum256([]byte(containerID + "/" + ifName))
}

// HostVethName is the host-side veth name of an attachment: "pn" and 13
// hex digits of sha256(containerID/ifName). DEL, CHECK and GC find what
// ADD made from the name alone.
func HostVethName(containerID, ifName string) string {
	h := attachmentHash(containerID, ifName)
	return HostVethPrefix + hex.EncodeToString(h[:])[:hostVethHashLen]
}

// IsHostVethName reports whether name has the shape HostVethName gives.
func IsHostVethName(name string) bool {
	if len(name) != len(HostVethPrefix)+hostVethHashLen || !strings.HasPrefix(name, HostVethPrefix) {
		return false
	}
	for _, c := range name[len(HostVethPrefix):] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// RoutedHostMAC is the MAC of every host-side veth in routed mode, as in
// Calico: the pod only ever talks to the host, so one well-known address
// makes the gateway's neighbour entry the same in every pod.
var RoutedHostMAC = net.HardwareAddr{0xee, 0xee, 0xee, 0xee, 0xee, 0xee}

// AttachmentMACs returns deterministic, locally administered unicast
// MACs for the host and container ends of an attachment. Setting them at
// creation means ADD never reads a link back to learn its address, and a
// container recreated with the same ID keeps its MAC.
func AttachmentMACs(containerID, ifName string) (host, container net.HardwareAddr) {
	h := attachmentHash(containerID, ifName)
	mk := func(b []byte) net.HardwareAddr {
		m := net.HardwareAddr{b[0], b[1], b[2], b[3], b[4], b[5]}
		m[0] = m[0]&0xfc | 0x02 // unicast, locally administered
		return m
	}
	return mk(h[16:22]), mk(h[24:30])
}

// ValidIfName checks a Linux interface name: 1-15 bytes, no '/', ':' or
// white space, not "." or "..".
func ValidIfName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("interface name is empty")
	case len(name) > 15:
		return fmt.Errorf("interface name %q is longer than 15 bytes", name)
	case name == "." || name == "..":
		return fmt.Errorf("%q is not a valid interface name", name)
	case strings.ContainsAny(name, "/: \t\n\r\v\f"):
		return fmt.Errorf("interface name %q contains '/', ':' or white space", name)
	}
	return nil
}
