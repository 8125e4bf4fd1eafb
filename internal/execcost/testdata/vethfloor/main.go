// The least a routed-veth plugin does in the kernel, and nothing else: a
// veth pair made with its pod end in the pod's namespace, the host end
// up with a /32 route to the pod, and in the pod an address, the link
// up, a route to the gateway and the default route through it; DEL
// deletes the host end. No IPAM (the address comes from the container
// ID), no nftables, no sysctls, no checks: the floor under podnet's ADD
// and DEL on a machine, exec included.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"

	"github.com/vishvananda/netlink"

	"github.com/podnet/podnet/netns"
)

var gateway = net.IPv4(169, 254, 1, 1)

func main() {
	conf, _ := io.ReadAll(os.Stdin)
	var c struct {
		CNIVersion string `json:"cniVersion"`
	}
	_ = json.Unmarshal(conf, &c)
	id := sha256.Sum256([]byte(os.Getenv("CNI_CONTAINERID")))
	host := "fl" + hex.EncodeToString(id[:])[:11]
	var err error
	switch os.Getenv("CNI_COMMAND") {
	case "ADD":
		// 10.64.0.0/10: one address per container ID, as an IPAM would.
		ip := net.IPv4(10, 64|id[0]&63, id[1], id[2])
		if err = add(host, os.Getenv("CNI_IFNAME"), os.Getenv("CNI_NETNS"), ip); err == nil {
			fmt.Printf(`{"cniVersion":%q,"interfaces":[{"name":%q,"sandbox":%q}],"ips":[{"address":"%s/32","interface":0}]}`,
				c.CNIVersion, os.Getenv("CNI_IFNAME"), os.Getenv("CNI_NETNS"), ip)
		}
	case "DEL":
		var l netlink.Link
		if l, err = netlink.LinkByName(host); err == nil {
			err = netlink.LinkDel(l)
		} else if _, ok := err.(netlink.LinkNotFoundError); ok {
			err = nil
		}
	case "VERSION":
		fmt.Print(`{"cniVersion":"1.1.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}`)
	}
	if err != nil {
		fmt.Printf(`{"cniVersion":%q,"code":999,"msg":%q}`, c.CNIVersion, err.Error())
		os.Exit(1)
	}
}

func add(host, ifName, nsPath string, ip net.IP) error {
	f, err := os.Open(nsPath)
	if err != nil {
		return err
	}
	defer f.Close()
	la := netlink.NewLinkAttrs()
	la.Name = host
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: ifName, PeerNamespace: netlink.NsFd(int(f.Fd()))}); err != nil {
		return err
	}
	hl, err := netlink.LinkByName(host)
	if err != nil {
		return err
	}
	if err := netlink.LinkSetUp(hl); err != nil {
		return err
	}
	host32 := &net.IPNet{IP: ip, Mask: net.CIDRMask(32, 32)}
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: hl.Attrs().Index, Dst: host32, Scope: netlink.SCOPE_LINK}); err != nil {
		return err
	}
	return netns.Do(nsPath, func() error {
		pl, err := netlink.LinkByName(ifName)
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(pl, &netlink.Addr{IPNet: host32}); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(pl); err != nil {
			return err
		}
		gw := &net.IPNet{IP: gateway, Mask: net.CIDRMask(32, 32)}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: pl.Attrs().Index, Dst: gw, Scope: netlink.SCOPE_LINK}); err != nil {
			return err
		}
		return netlink.RouteAdd(&netlink.Route{LinkIndex: pl.Attrs().Index, Gw: gateway})
	})
}
