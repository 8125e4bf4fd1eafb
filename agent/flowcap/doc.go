// Package flowcap is the agent's flow capture (issue 32): it produces
// the flow records (flows.Record) of the connections this node's pods
// take part in, with the verdict the node's data path gave them, from
// what the kernel already does. No packet goes to userspace on the
// forwarding path: a forwarded connection is seen through conntrack's
// events, a dropped packet through the NFLOG record its dropping rule
// logs (rate-limited in the rules).
//
// Forwarded connections (capture.go): a netlink socket in the node's
// network namespace joins ctnetlink's NEW and DESTROY groups
// (github.com/ti-mo/conntrack decodes the events). NEW gives the Start
// record, DESTROY the End record with both directions' packets and
// bytes. The policy rules that accepted the first packet are read from
// the connection's conntrack label, which every accepting rule ORs its
// id into (dataplane/policyrules: the egress rule's id in label bits
// 0-63, the ingress rule's in bits 64-127; Labels), and named through a
// RuleIndex (policyrules.FlowIndex). ctnetlink's DESTROY event carries
// no labels, so the rules of a NEW are remembered by conntrack id until
// its DESTROY (remember.go, bounded): the End names the Start's rules
// even when the policy changed in between. Only connections with a pod of this
// node at one end are recorded (the Resolver says which pod holds an
// address and where it runs). A connection kube-proxy DNATed has a
// Service address as its original destination: the record's destination
// is the reply's source, the pod that served it, and the Service
// address is not recorded.
//
// Packet and byte counts need net.netfilter.nf_conntrack_acct=1 in the
// node's namespace, which the service sets when it starts (its original
// value recorded first through internal/sysctlrecord, so removing podnet
// restores it). Its cost: 32 more bytes per conntrack entry (the acct
// extension; a node with 262,144 entries, 8 MiB) and two atomic adds per
// packet on the entry's counters, on every connection of the node,
// flows or not. Connections that existed before it was set end without
// counts.
//
// Drops (drop.go, fold.go): the service binds the NFLOG group (default
// 7371, dataplane/nflog) the pod chains log their drops to with the
// prefix "podnet-flow <rule id in 16 hex digits>" (dropped-policy, the
// rules from the index) and the source guard with "podnet-guard"
// (dropped-guard). The packets of one 5-tuple within FoldWindow (1 s)
// fold into one burst: its Start record at once on the first packet,
// an End record with the count when the window closes (only when more
// than one packet came); the open bursts are bounded (4096).
//
// Losses: the conntrack socket's receive buffer is large (4 MiB, forced
// past rmem_max; NFLOG's drops are rate-limited in the rules); when the
// kernel still drops events (ENOBUFS), Config.Lost
// is called with the source ("conntrack" or "nflog": the metric
// podnet_flow_capture_lost_total), once per conntrack event lost (the
// socket's drop count, SO_MEMINFO) or per NFLOG overrun, and the
// listener keeps going.
//
// The package must not write to the API, change any rule or table, or
// switch a thread's namespace except through netns.Do when it opens its
// sockets. The join of events, labels and drops into records (join.go,
// drop.go, fold.go, remember.go) is pure.
package flowcap
