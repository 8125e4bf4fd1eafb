// Package nflog receives the packets an nftables "log group N" statement
// sends to userspace (NFLOG, nfnetlink_log), and reads their headers:
// the rule's prefix, the addresses, the protocol and the ports, of the
// inet families' packets and, by their EtherType, of a bridge family's
// (IPv4, IPv6, and ARP's sender and target).
//
// NFLOG, not "log" to the kernel's ring buffer: the kernel writes the
// latter only from the initial network namespace unless
// net.netfilter.nf_log_all_netns is set, so a node that is itself a
// namespace (a test's, a nested node's) would log nothing.
//
// Listen binds one group in the calling thread's network namespace (or
// the one of WithNetNSFd); Receive returns the records as they come;
// Close releases the group (the kernel forgets a group's listener when
// its socket closes). The parser (parse.go) is pure and works on the
// bytes of one message.
//
// The package must not hold more than its one socket, switch the
// calling thread's namespace, or interpret the records: what a prefix
// means is its writer's business.
package nflog
