// Package policyrules writes a node's compiled NetworkPolicy and
// ClusterNetworkPolicy (a *policy.IR, compiled for the node with
// policy.Options.Node) as an
// nftables ruleset in the kernel, and keeps it current as new IRs come:
// each Apply changes only what differs from the last one, in one atomic
// batch.
//
// Everything is decided in the kernel, per packet, by set and map
// lookups; nothing goes to userspace, except, with the opt-in deny log
// (WithDenyLog, denylog.go) or the flow log (WithFlowLabels,
// flowlabels.go), a rate-limited NFLOG record of a packet a pod chain is
// about to drop. The ruleset is its own table,
// inet podnet-policy (TableName), owned whole by this package:
//
//	chain forward         (filter hook forward priority 0)   a routed packet's source pod: egress
//	chain forward-ingress (filter hook forward priority 1)   a routed packet's destination pod: ingress
//	chain input           (filter hook input priority 0)     local pod -> the node's own addresses
//	chain output          (filter hook output priority 0)    the node -> its local pods
//
//	ct state established,related accept     replies, and flows already allowed
//	[input, output] icmpv6 type nd-router-solicit-nd-redirect accept
//	[forward, input]  ip saddr vmap @out4 / ip6 saddr vmap @out6    -> jump out-<pod>
//	[forward-ingress, output] ip saddr @node4 accept / ip6 saddr @node6 accept
//	[forward-ingress, output] ip daddr vmap @in4 / ip6 daddr vmap @in6      -> jump in-<pod>
//
// Each side of a packet is judged in a base chain of its own because an
// accept ends only the base chain it is given in (a drop is final): a
// class chain (below) allows with accept, and the other side is still
// judged after it.
//
// A per-pod chain (in-<hash> for ingress, out-<hash> for egress, one per
// isolated pod and direction) starts with the pod's own addresses
// (return: a pod may always reach itself), then has one rule per IR
// rule, peer set and family ("counter return": allowed, go on to the
// other side's check), and ends with "counter drop". Peers are named
// sets shared by every rule that refers to them (peer4-/peer6- for pod
// selectors, cidr4-/cidr6- interval sets for ipBlocks, ports- interval
// sets of "inet_proto . inet_service", named4-/named6- sets of
// "address . inet_proto . inet_service" for egress named ports), so a
// packet costs two map lookups and a few set lookups in the chains of
// its two pods, whatever the number of pods and nodes.
//
// Folding (fold.go) makes a first packet's cost independent of the number
// of NetworkPolicy rules too. NetworkPolicy's rules all allow, so their
// order decides no verdict; when a pod chain has at least 8 rules of a
// family whose remote end is a pod-selector peer set or an ipBlock of at
// most 256 addresses of the family (hosts, small ranges: their addresses
// are taken as a peer set's), they are one lookup instead:
//
//	in-<pod>:      self; ...; ip saddr vmap @fold4-<hash>; ip6 saddr vmap @fold6-<hash>
//	               the other rules (wider ipBlocks, named ports, every source), in order; log; counter drop
//	fold4-<hash>:  each address of the union of the folded rules' peer sets : jump class-<hash>
//	class-<hash>:  each folded rule whose peer set holds the address, in order:
//	               <its port match> [ct label set <its id>] counter accept
//
// A class chain's accept ends the judgement of this side; a packet no
// rule of its class matches returns to the pod chain and goes on to the
// other rules, the log and the drop: the verdict of the walk it replaces.
// Which of several allowing rules counts a packet and labels its flow
// may differ from the walk (a folded rule comes before an unfolded one);
// Counters sums a rule over every class chain that holds it (the comment
// is the rule's, "allow <policy> <direction> <index>"). Fold maps are
// named by the rules they fold, class chains by their rules, so pods the
// same policies select share them, and a pod joining or leaving a peer
// set changes one element (and adds or drops a class chain when its class
// is new or empty); a policy added or removed makes a new fold map. The
// folded peer sets are not written. Elements are copies: a fold's union
// is at most 16,384 addresses and a node's folds 65,536 (beyond them the
// rules are walked), which bounds the kernel's and the Renderer's memory
// (about 60 bytes an element and 300 a class chain in the Renderer).
// The address, not a concatenation with the port, keys the map: a hash
// lookup whatever the ports, and the rule identity kept for labels and
// counters; an address that many rules name walks those rules in its
// class chain.
//
// ClusterNetworkPolicy's tiers live in the same chains, with the same
// sets (a pod and direction gets a chain when NetworkPolicy isolates it
// or a ClusterNetworkPolicy with rules in that direction selects it):
//
//	in-<pod>:      self (return)
//	               Admin rules, by priority, name, index:
//	                 Accept "counter return", Deny "counter drop" (after
//	                 the deny log's record), Pass "counter goto intail-<pod>"
//	               goto intail-<pod>             (only if an Admin rule passes)
//	intail-<pod>:  isolated: NetworkPolicy's rules (counter return), log, counter drop
//	               otherwise: Baseline rules: Accept and Pass "counter return",
//	                 Deny "counter drop"; the chain's end returns: allowed
//
// (out-/outtail- for egress; without an Admin Pass, what intail would
// hold follows the Admin rules in the pod chain itself). A tier rule's
// comment is "cnp <tier> <action> <policy> <direction> <index>", which
// Counters reads into Counters.Cluster: what each Accept let through,
// each Deny dropped and each Pass sent on to the next tier.
//
// With WithFlowLabels, every rule that accepts (a NetworkPolicy rule's
// "counter return", a tier's Accept, a Baseline Pass) first sets the
// connection's conntrack label to its rule's id ("ct label set", the
// egress side's id in the low 64 bits, the ingress side's in the high
// ones: the kernel ORs them together), and every drop is preceded by a
// rule "limit name flow-log log group 7371 prefix podnet-flow <id>" (the
// tier rule's comment "cnp-flow ...", the final drop's "flow <pod>
// <direction>"). Ids are hashes of the rules' identities; FlowIndex
// names them.
//
// Semantics match policy.Decide, the oracle (the differential root test
// checks it with real packets), with these choices:
//
//   - The priority is filter (0): after DNAT in prerouting and output
//     (-100, where kube-proxy translates Services, iptables and nftables
//     modes alike), so policy sees the pod a Service picked; before
//     source NAT (100), so it sees the pod that sent.
//   - "From its own node" is by address, as Decide has it: the sources
//     in @node4/@node6 are IR.Nodes' addresses of this node. The agent
//     should list in Node.IPs every address the node sends from to its
//     pods (in bridge mode, the bridge's gateway address too).
//   - Established flows stay: a connection a policy allowed keeps going
//     through conntrack after a new policy would deny it, until it ends,
//     as in Calico and Cilium. New connections obey the new rules at once.
//   - Packets conntrack calls invalid are not dropped by policy: they are
//     judged like new ones, so an isolated pod gets nothing a rule does
//     not allow, and traffic of pods no policy isolates is left alone.
//   - Denied packets are dropped, not rejected: a peer learns nothing,
//     and no packet is sent on behalf of a pod.
//   - ICMPv6 neighbour discovery to and from the node is never judged
//     (Decide does not model it; a pod without it loses IPv6).
//   - Traffic between two pods of one bridge (bridge mode) crosses the
//     inet hooks only when the bridge hands its IP traffic over
//     (br_netfilter's bridge-nf-call-iptables and -ip6tables,
//     dataplane.BridgeNetfilterSysctls, which the agent's policy service
//     sets): then it is judged like routed traffic, with conntrack. A
//     bridge-family table could not keep state on kernels without
//     nf_conntrack_bridge (TestBridgedPodsJudged).
//
// The package must not exec nft, keep state other than what it last
// committed (a new Renderer starts with a full resync), or switch
// network namespaces: a Renderer acts in the namespace it was opened in.
// A Renderer is not safe for concurrent use.
package policyrules
