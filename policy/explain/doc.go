// Package explain answers "may this reach that, and why?" for one
// connection: `podnet policy explain`'s pure part. From the cluster's API
// objects (as the CLI listed them) and the user's words (namespace/pod or
// an address at each end, a port by number or by name, a protocol) it
// builds a Report with policy.Explain: allowed or denied, and per side
// (the source's egress, the destination's ingress) the policies that
// isolate the pod and what each of their rules matched, and the
// ClusterNetworkPolicy rules of both tiers that select it, which one
// decided (tier, priority, rule, action) or passed, and why. It formats the
// report for people (WriteText) and machines (JSON).
//
// The package must not do I/O beyond writing to the writer it is given:
// listing the objects is the caller's job.
package explain
