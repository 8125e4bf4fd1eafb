// Package nodeclean removes podnet from one node: what the agent, the
// plugins and `podnet install` put there, and nothing else.
//
// It works in two parts. Survey (survey.go) reads the node: the conf
// dir, the bin dir, podnet.vxlan and podnet.wg, routes of protocol 97 in
// every table, the nftables tables, podnet's state and run directories, and the
// sysctl record (internal/sysctlrecord). Plan (plan.go, pure) turns what
// was found into ordered steps: the network config first, so that the
// runtime reports the node's network not ready at once and starts no pod
// on a half-removed network, then the plugins, podnet.vxlan (its
// neighbours and FDB entries go with it), the routes, the nftables
// tables, the state and run files, and the sysctls podnet changed,
// restored to their recorded values while they still hold podnet's.
// Apply (apply.go) carries the steps out; a step whose object is already
// gone succeeds, so removal is idempotent and a node without podnet
// needs no step.
//
// What is podnet's: a network config that runs the podnet plugin, by
// content, whatever its name (another CNI's file is never touched); the
// plugins podnet, podnet-ipam and podnet-portmap by name, and loopback
// only when its Go build information says podnet built it (upstream's
// loopback, or another CNI's, stays); the devices podnet.vxlan and
// podnet.wg (with --encryption=wireguard; the private key goes with the
// state directory); routes
// with protocol 97; the tables inet podnet, inet and bridge podnet-guard,
// inet podnet-closed, inet podnet-policy and inet podnet-portmap; and
// the whole content of the state and run directories, which are podnet's
// own.
//
// It leaves running pods alone: their veths, addresses and pod routes
// stay until the pods are deleted, and the runtime's CNI cache is the
// runtime's. It must not touch anything it cannot tell is podnet's.
package nodeclean
