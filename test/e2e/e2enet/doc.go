// Package e2enet is the simulated multi-node network that podnet's
// end-to-end tests run on, whatever the agents' datastore: nodes as
// network namespaces on an underlay the test builds (a bridge for one L2
// segment, or a router between one subnet per node), a real `podnet
// agent` process in each node's namespace, pods as namespaces wired by
// the real plugins with the config the node's agent installed, and the
// checks of what Kubernetes' network model promises: nodes start with
// forwarding off, as a fresh host, and podnet turns it on; every pod
// reaches every other pod under its own address; traffic to a host
// outside the pools leaves under the node's address; pods have the MTU
// the underlay carries (Underlay.MTU sets its links', jumbo frames
// included), so a bulk transfer between nodes sends and receives no
// ICMP "fragmentation needed" or "packet too big" in any namespace on
// the way (counted in each namespace's /proc/net/snmp and snmp6); and
// once the pods are deleted nothing of them is left on the nodes.
//
// The datastore is the caller's: test/e2e runs etcd in a helper process
// on the underlay's hub, test/k8s a kube-apiserver; both listen on
// Underlay.Server, and the caller gives the agents' datastore flags and
// the config they install.
//
// It is test code, for tests that run as root: everything happens in
// namespaces it creates, with underlay addresses from 198.18.0.0/15 and
// fd00:198:18::/48, and every namespace, process and directory it makes
// is removed when the test ends, pass or fail. It must not send a packet
// anywhere else.
package e2enet
