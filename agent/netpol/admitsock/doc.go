// Package admitsock is the first-packet handshake between CNI ADD and
// the node agent's policy service: the plugin tells the agent, on a unix
// socket (DefaultSocket, 0600), which pod it is wiring (namespace and
// name from CNI_ARGS, container ID, interface names) and the pod's
// addresses, and the agent answers once the pod is as closed as its
// NetworkPolicies say: "not selected" at once for a pod no policy
// selects, "selected" once rules with the pod's addresses are in the
// kernel, or an error. The agent side is agent/netpol's Admission; the
// plugin side is plugins/podnet (admit.go).
//
// The wire is one length-prefixed binary request and one answer per
// connection, in the framing of ipam/store/agentsock (a big-endian
// uint32 length, then the bytes), carrying the caller's deadline so that
// the agent stops waiting when the plugin does. Requests carry a
// protocol version; another version is refused with a message naming
// both, never misread.
//
// The package is linked by the plugin: it must import nothing heavier
// than package net (internal/execcost's test keeps it so), and it
// decides nothing: what the plugin does without an answer (keep the pod
// closed) is the plugin's business.
package admitsock
