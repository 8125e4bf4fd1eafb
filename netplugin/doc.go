// Package netplugin is the kubelet's network layer, as a library a
// container runtime can embed: the NetworkPlugin interface, two plugins,
// and PluginManager, which owns the cross-cutting work — per-pod locks,
// metrics, error wrapping — so plugins only do networking.
//
// The two plugins differ only in where a pod's default network comes
// from: the cni plugin takes it from the conf dir and keeps it current by
// watching the dir; kubenet builds a bridge network from the node's pod
// CIDR. Each is a network source feeding the one attacher, which attaches
// every pod to the loopback network and the default network, and detaches
// it.
//
// It talks to plugins only through cni.Runtime, and enters a network
// namespace only through package netns: to read a pod's live interface,
// and, with LoopbackInProcess, to bring a pod's lo up.
package netplugin
