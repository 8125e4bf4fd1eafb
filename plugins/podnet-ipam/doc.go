// Command podnet-ipam is the CNI IPAM plugin over podnet's block IPAM:
// host-affine blocks of cluster pools kept in etcd, or in a bbolt file on
// one machine. The podnet plugin runs the same code in process; this
// binary serves other main plugins (bridge, ptp, ...). See package
// ipamcni for the configuration.
package main
