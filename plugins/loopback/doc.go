// Command loopback is podnet's CNI plugin for the loopback interface: ADD
// brings lo up inside CNI_NETNS and reports it with its addresses
// (127.0.0.1/8 and ::1/128 as the kernel assigns them), DEL takes it down
// again and succeeds when the namespace is already gone, CHECK verifies it
// is up, STATUS and GC have nothing to do.
//
// It must not touch any interface but lo, nor anything outside CNI_NETNS.
// CNI_IFNAME is ignored: the interface is always lo.
package main
