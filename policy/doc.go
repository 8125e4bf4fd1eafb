// Package policy is the pure core of podnet's NetworkPolicy
// (networking.k8s.io/v1) and ClusterNetworkPolicy
// (policy.networking.k8s.io/v1beta1, sigs.k8s.io/network-policy-api
// v0.3.0) enforcement: it says which pods are isolated, what is allowed
// to reach them and what they may reach, and why.
//
// It has three parts that must stay independent of each other:
//
//   - The slim model (model.go, convert.go): Pod, Namespace and Node carry
//     only what policy needs, so the agent can keep every pod of a large
//     cluster in memory (BenchmarkSlimPodMemory measures it). Conversion
//     from the core/v1 objects decides what a pod means to policy: a
//     hostNetwork pod is never a peer by selector and is never isolated,
//     a finished pod has no address.
//   - Compile (compile.go, selector.go, ipblock.go, ports.go, ir.go): turns
//     the policies and the cluster into an IR a renderer can write as
//     nftables: per pod, isolation per direction and allow rules that
//     refer by key to shared sets (peer sets, one per distinct selector
//     pair; CIDR sets, each ipBlock minus its excepts as exact prefixes;
//     port sets; named-port sets of address . protocol . port elements).
//     Keys are canonical, so identical selectors in different policies
//     share one set and a renderer can diff two IRs set by set.
//     Evaluate (evaluate.go) answers a connection question from the IR
//     alone, by address, the way the kernel will.
//   - Decide (decide.go): the reference oracle. It answers the same
//     question straight from the API objects, with apimachinery's label
//     selectors and no sets, and says why (which policy and rule allowed
//     the connection, or which policies isolate the pod); Explain
//     (explain.go) adds, from the same code, which peer and port of each
//     rule matched, for people asking why. It shares no matching code
//     with Compile, so a differential test of Evaluate against Decide
//     checks the compilation, and later a test of the kernel's rules
//     against Decide checks the renderer.
//
// The semantics, with their sources (the Kubernetes "Network Policies"
// concept page and the API reference of networking.k8s.io/v1), are written
// next to the code that implements them and pinned by semantics_test.go.
// Where the API leaves a choice to the implementation, or a field is
// invalid (the API server would have refused it), this package chooses
// the answer that allows less: an invalid peer, port or selector matches
// nothing, and Compile reports it as a Problem.
//
// # ClusterNetworkPolicy
//
// The semantics implemented (cluster.go, clusterdecide.go,
// compilecluster.go; pinned by TestClusterSemantics), with the v1beta1
// API's doc comments they come from:
//
//   - Tiers (ClusterNetworkPolicySpec.tier): "Admin tier, NetworkPolicy
//     tier, Baseline tier", per side of a connection (the source's
//     egress, the destination's ingress), as for NetworkPolicy: both
//     must allow. "If Admin tier has made a final decision (Accept or
//     Deny) on a connection, then no further evaluation is done";
//     "v1.NetworkPolicy always makes a final decision for selected pods.
//     Further evaluation only happens for Pods not selected by a
//     v1.NetworkPolicy": the Baseline tier is read only in a direction
//     no NetworkPolicy isolates the pod in, and there NetworkPolicy's
//     isolation overrides every Baseline rule, Accept and Deny alike.
//     "If a given connection wasn't allowed or denied by any of the
//     tiers, the default kubernetes policy is applied": allow.
//   - Priority (spec.priority): "lower priority values have higher
//     precedence". Policies of one priority: "the implementation can
//     apply any of the matching policies"; podnet reads them by name, so
//     the answer is deterministic and the kernel agrees with Decide.
//     Within a policy, rules in order: "a rule that appears at the top
//     ... would take the highest precedence". The first rule that
//     matches in a tier is the tier's answer.
//   - Actions (ClusterNetworkPolicyIngressRule.action): Accept "No
//     further ingress ClusterNetworkPolicy or NetworkPolicy rules will be
//     processed" (for egress: "but any ingress rules at the destination
//     do apply"); Deny "Drops the selected traffic"; Pass "Skips all
//     further ClusterNetworkPolicy rules in the current tier ... and
//     passes evaluation to the next tier": from Admin to NetworkPolicy
//     (then Baseline), from Baseline to the default (allow).
//   - Subjects (ClusterNetworkPolicySubject): namespaces (all their
//     pods) or pods (namespace AND pod selectors); "host-networked pods
//     are not included". A namespace the snapshot does not know cannot
//     be selected (its labels are unknown), as for NetworkPolicy.
//   - Peers: namespaces and pods peers select pods the same way (never
//     host-networked ones); networks (egress) are CIDRs that match any
//     address, pods' too ("cluster-internal traffic will be checked
//     against the rule as well"); nodes (egress, experimental) match
//     "the IPs present in the node.Status.Addresses" of the nodes whose
//     labels the selector matches (Node keeps its InternalIP and
//     ExternalIP addresses: the others are names); domainNames
//     (experimental, Accept rules only) match nothing, since podnet does
//     not resolve names, which allows less, never more.
//   - Protocols (ClusterNetworkPolicyProtocol): none listed matches
//     every protocol, ICMP included; TCP, UDP and SCTP with a port
//     number, an inclusive range (start < end), or no port, every port
//     of the protocol. destinationNamedPort (experimental) is the
//     destination pod's container port of that name, on its protocol:
//     resolved on the subject for ingress, on each peer pod for egress.
//   - A pod's traffic to itself is always allowed ("A Pod connecting
//     directly to its own Pod IP is never subject to
//     ClusterNetworkPolicy"; the kernel does not even see it), and so is
//     ingress from the pod's own node, which NetworkPolicy requires and
//     which no valid ClusterNetworkPolicy ingress peer can name anyway
//     (ingress peers are pods only); a Service hairpin back to the pod
//     is treated the same (the API does not require enforcing it in
//     Beta).
//   - What the API server would refuse: a policy with an unknown tier or
//     a subject without exactly one field applies to no pod; a rule with
//     a peer or protocol without exactly one field (maybe a newer API's),
//     an unknown action, a bad selector, CIDR or port, fails closed as
//     ClusterNetworkPolicyIngressPeer asks: "For "Accept" rules, "fail
//     closed" means: "treat the rule as matching no traffic". For "Deny"
//     and "Pass" rules ... "treat the rule as a 'Deny all' rule"". Each
//     is a Problem of Compile's.
//
// The package must not do I/O, talk to the API server, hold locks or
// start goroutines. Its inputs are values; its outputs are read-only
// values.
package policy
