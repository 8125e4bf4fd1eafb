// Package cniinstall installs the plugins and the network config on the
// node once it is ready for pods (named so beside the top-level package
// install, which it uses to write files atomically).
//
//   - config.go: Config: where the plugins and the config go, and the
//     config built from a conflist file or generated, with this node's
//     name and its pod MTU; Check fails the agent's start on a bad one.
//   - nodecidr.go: the node-CIDR model's rewrite of the conflist's
//     podnet-ipam for the node's podCIDRs.
//   - conflist.go: ConflistPools, the pools a conflist declares (what
//     block IPAM seeds).
//   - service.go: the install service: waits for the node to be
//     registered, routed (and in block IPAM for the socket), installs,
//     and in the node-CIDR model writes the config again when the
//     podCIDRs change; with UninstallOnExit removes it on exit.
package cniinstall
