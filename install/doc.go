// Package install puts podnet on a node the way a DaemonSet's install-cni
// init container does: plugin binaries copied into the CNI bin dir and a
// network config written into the conf dir, each replaced atomically so a
// runtime never executes a half-written binary or reads a half-written
// config, and a running plugin keeps its old binary until it exits.
//
// It only writes files; it does not configure the network.
package install
