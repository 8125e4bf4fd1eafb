// Package policy is the pure core of podnet's NetworkPolicy
// (networking.k8s.io/v1) enforcement: it says which pods are isolated, what
// is allowed to reach them and what they may reach, and why.
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
// The package must not do I/O, talk to the API server, hold locks or
// start goroutines. Its inputs are values; its outputs are read-only
// values.
package policy
