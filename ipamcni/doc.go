// Package ipamcni is podnet-ipam, the CNI face of the block IPAM: it reads
// the plugin's configuration, opens the store (an embedded bbolt file, or
// etcd through its light gateway client), and turns ADD, DEL, CHECK,
// STATUS and GC into Allocator calls with the handle <network>.<container>.
//
// It is a library so that the podnet plugin can run it in process (no
// second exec on the ADD path); plugins/podnet-ipam is a thin main over it
// for any other main plugin.
package ipamcni
