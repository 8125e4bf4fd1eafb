// Package dataplane is podnet's netlink work: veth pairs, addresses,
// routes, neighbours, sysctls, bridges and the nftables masquerade set.
// Each file is one small piece that the plugins compose; each piece is
// testable on its own in a throw-away network namespace.
//
// Functions act on the namespace of the netlink handle they are given
// (see NewHandle), or, for sysctls, on the namespace of the calling
// thread: a caller that wants another namespace's sysctls runs them
// inside netns.Do. The package never switches namespaces itself.
//
// Pure logic (names, the description of rules and sysctls) is kept
// apart from the I/O, so that it is unit-tested without root; the owner
// tags are package tag, which portmap shares. Failures a caller acts on
// are of dataplane's own kinds (errors.go): the package knows nothing of
// CNI. It must not exec processes (no ip, nft or iptables), must not
// sleep, and must not move links between namespaces: a veth is created
// with its peer already in the container's namespace.
package dataplane
