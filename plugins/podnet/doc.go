// Command podnet is podnet's CNI plugin for a pod's main interface, in
// one of two modes:
//
//   - "routed" (the default), Calico's model: a veth pair whose host end
//     (pn + 13 hex digits of a hash of container ID and ifname, MAC
//     ee:ee:ee:ee:ee:ee, proxy ARP) carries a /32 (/128) host route to
//     the pod; the pod has its address as /32 (/128) and a default route
//     via 169.254.1.1 (IPv6: via the host end's link-local address).
//   - "bridge", flannel's and kubenet's cbr0 model: the host end is a
//     port of a bridge that holds the gateway address; the pod has the
//     address with its subnet mask and a default route via the gateway.
//     With podnet-ipam that mask is the pool's: bridge mode is one node's.
//
// Both are dual-stack, turn the node's forwarding on (it is the pods'
// gateway), optionally masquerade the pods' traffic to anything but the
// cluster's pods (per network a chain in nftables table "podnet" and sets
// of pod addresses and exclusions), and delegate address management to
// an IPAM through the ipamClient seam: podnet-ipam in this process, any
// other IPAM plugin exec'd. With the portMappings capability, podnet
// publishes the pod's host ports itself, in this process, with package
// portmap (the table and owner tags podnet-portmap uses).
//
// Configuration (besides name, type, cniVersion, dns, capabilities):
//
//	mode              "routed" (default) or "bridge"
//	mtu               MTU of both veth ends (and of the bridge); 0: kernel default
//	bridge            bridge mode: the bridge's name, default "podnet0"
//	hairpinMode       bridge mode: hairpin on the pod's bridge port
//	isDefaultGateway  bridge mode: default route via the bridge; default true
//	promiscMode       bridge mode: bridge promiscuous
//	ipMasq            masquerade traffic from the pods to anything but
//	                  this network's pods on this node and masqExclude
//	masqExclude       CIDRs never masqueraded (the cluster's pod CIDRs);
//	                  default: podnet-ipam's pools; with another IPAM, the
//	                  subnets it hands out when wider than a host route,
//	                  else required
//	ipam              the IPAM plugin's configuration; "type" is required
//
// A field of bridge mode in a routed configuration is an error (code 7,
// naming the field), not something silently ignored.
//
// A repeated ADD for the same container and ifname finds its complete
// attachment by the host veth's name and alias, returns the result
// rebuilt from the kernel's state, and changes nothing but a missing
// masquerade entry, which it restores (the IPAM is not called again). An
// attachment left half-made by an ADD that died is removed and made
// afresh.
//
// ADD is lean on purpose: netlink and /proc/sys only, one netlink handle
// per namespace, no process but an exec'd IPAM, no sleeps, and no link
// ever moved between namespaces (the container end is created in place).
// What it and DEL do side by side, and what they wait for, is in
// docs/architecture.md. DEL needs neither the namespace nor prevResult
// nor a configuration that still validates. CHECK compares every part of
// the attachment with prevResult and reports each difference; STATUS is
// the IPAM's; GC removes the network's attachments that are not valid,
// then passes GC on to the IPAM.
//
// dataplane and portmap report failures in their own terms; they get
// their CNI codes in one place, cniError, which every verb's error
// passes through.
//
// The plugin must not touch links, routes or nftables objects that are
// not its own: everything it creates is named or tagged from the
// network name, container ID and ifname, so DEL, CHECK and GC find it
// without state.
package main
