// Package netplugin is the kubelet's network layer, as a library a
// container runtime can embed: the NetworkPlugin interface, the cni plugin
// (a loopback network plus the default network taken from the conf dir and
// kept current by watching it), kubenet (a bridge network built from the
// node's pod CIDR), and PluginManager, which owns the cross-cutting work —
// per-pod locks, metrics, error wrapping — so plugins only do networking.
//
// It talks to plugins only through cni.Runtime, and enters a network
// namespace only through package netns, to read a pod's live interface.
package netplugin
