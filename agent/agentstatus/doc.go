// Package agentstatus is the status document a node's agent serves on
// its metrics listener at /status, and that `podnet status` reads from
// every agent of a cluster: what the agent is (version, datastore, IPAM
// model, routing mode, encryption), each service's readiness (the list
// /readyz reports), and what it knows of its node (policy, pods).
//
// It holds the document's types and the build's version only: no I/O,
// no interpretation. Judging a cluster from the documents is
// clusterstatus's; serving one is the agent's.
package agentstatus
