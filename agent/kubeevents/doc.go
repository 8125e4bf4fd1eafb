// Package kubeevents is how the node agent says on Kubernetes objects
// what users would otherwise find only in its log: core/v1 Events
// (client-go's tools/record, which aggregates repeats and rate-limits
// per object), reported by component podnet-agent from the node's host.
//
//   - recorder.go: Recorder, the Events of one node's agent (nil records
//     nothing: tests and the etcd datastore run without one), and the
//     references of the objects it speaks of (Pod, Node, IPPool,
//     NetworkPolicy, ClusterNetworkPolicy).
//   - dedup.go: the pure parts that keep a repeated state from becoming
//     a stream of Events: Transition (a failure, and the recovery after
//     one) and Once (one Event per key, e.g. pool and revision).
//
// The reasons are constants here, so that docs/observability.md, the
// services and the tests name the same ones.
package kubeevents
