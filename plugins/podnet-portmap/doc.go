// Command podnet-portmap is podnet's CNI port-mapping plugin, chained
// after the plugin that gives the container its addresses. It publishes
// runtimeConfig.portMappings (capability "portMappings") on the host
// with nftables over netlink; see package portmap for the ruleset.
//
// Configuration:
//
//	{"type": "podnet-portmap", "capabilities": {"portMappings": true},
//	 "snat": true}
//
// "snat" (default true) masquerades hairpin traffic and traffic from
// 127.0.0.0/8; it is what makes a pod reach its own host port and the
// host reach 127.0.0.1:hostPort.
//
// ADD passes prevResult on unchanged. With an empty list of mappings
// every verb does nothing (a runtime sends DEL the capability arguments
// of ADD). DEL needs no prevResult: each nftables element names its
// attachment, so a DEL without runtimeConfig.portMappings (a runtime
// given no capability arguments) or with mappings it cannot read removes
// whatever elements the attachment has. GC removes the elements of the
// network's attachments that are not valid, and the table once it holds
// nothing.
//
// It must not run processes, and touches only its own nftables table,
// route_localnet on prevResult's host-side interfaces, and the UDP
// conntrack entries of the ports it maps.
package main
