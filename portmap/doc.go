// Package portmap publishes container ports on the host (the CNI
// "portMappings" capability) with nftables, programmed over netlink.
//
// Everything lives in one inet table, podnet-portmap, so one set of
// chains serves IPv4 and IPv6. The chains are fixed: what differs from
// one container to the next are only elements of six maps and sets, so
// the per-packet cost is a hash lookup whatever the number of mappings,
// and an ADD or DEL is one netlink batch of element changes:
//
//	map dnat4   { type inet_proto . inet_service : ipv4_addr . inet_service }
//	map hostip4 { type ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service }
//	set snat4   { type ipv4_addr . ipv4_addr }   pod . pod: hairpin and 127.0.0.1 SNAT
//	(dnat6, hostip6, snat6 the same for IPv6)
//
//	chain prerouting  { nat hook prerouting dstnat;  fib daddr type local goto hostports }
//	chain output      { nat hook output dstnat;      fib daddr type local goto hostports }
//	chain hostports   { dnat through hostip4, dnat4, hostip6, dnat6, in that order }
//	chain postrouting { nat hook postrouting srcnat; masquerade DNATed traffic whose
//	                    saddr . daddr is in snat4/snat6, or saddr 127/8 with daddr . daddr in snat4 }
//	chain input       { filter hook input; drop daddr 127/8 arriving on a non-loopback
//	                    interface unless it belongs to a DNATed connection }
//
// Every element carries its owner in its comment: "<network> <container
// ID> <ifname>". DEL removes exactly the elements of its attachment
// (without needing prevResult), GC the elements of its network whose
// attachment is not valid, and ADD refuses a host port whose element
// belongs to another attachment (KindConflict). ADD and DEL read the
// elements they may touch by key (dataplane/nftelem: AddLookups, and the
// request's keys for DEL), so their cost does not grow with the number
// of containers on the host; a DEL without prevResult, CHECK and GC list
// the maps.
//
// The package is split in a pure part (config.go, entry.go, plan.go,
// ruleset.go: validation, the entries an attachment should have,
// reconciliation with what exists, the table described as data) tested
// without a kernel, and the I/O part (nft.go, conntrack.go, sysctl.go,
// lock.go).
//
// Failures are of portmap's own kinds (errors.go); the package knows
// nothing of CNI, whose plugins map the kinds to codes and read a
// request's Container from prevResult (package portmapcni). It must not
// create processes (no nft, no iptables), must not touch any table but
// its own, and must not change anything outside the network namespace
// it runs in, except its lock file.
package portmap
