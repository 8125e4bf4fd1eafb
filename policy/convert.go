package policy

import (
	"net/netip"
	"unique"

	corev1 "k8s.io/api/core/v1"
)

// PodFromAPI keeps what policy needs of a pod.
//
//   - A pod that has finished (phase Succeeded or Failed) keeps no
//     addresses: its address may already belong to a new pod, which must
//     not be taken for it.
//   - A hostNetwork pod keeps no addresses either: they are its node's.
//     Policy treats its traffic as the node's (see Pod.policyPod).
//   - Ports are the named ports of the containers and of the sidecars
//     (init containers that restart always, which serve for the pod's
//     whole life); a port without a protocol is TCP, as in the Pod API.
//
// Strings that repeat across pods (namespace, node, label keys and
// values, port names) are interned, so a cluster's pods share them.
func PodFromAPI(p *corev1.Pod) Pod {
	out := Pod{
		Namespace:   intern(p.Namespace),
		Name:        p.Name,
		Node:        intern(p.Spec.NodeName),
		HostNetwork: p.Spec.HostNetwork,
		Labels:      internLabels(p.Labels),
	}
	if !p.Spec.HostNetwork && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
		out.IPs = podIPs(p)
	}
	for i := range p.Spec.InitContainers {
		c := &p.Spec.InitContainers[i]
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			out.Ports = appendNamedPorts(out.Ports, c.Ports)
		}
	}
	for i := range p.Spec.Containers {
		out.Ports = appendNamedPorts(out.Ports, p.Spec.Containers[i].Ports)
	}
	return out
}

func podIPs(p *corev1.Pod) []netip.Addr {
	var ips []netip.Addr
	add := func(s string) {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return
		}
		a = a.Unmap().WithZone("")
		for _, b := range ips {
			if a == b {
				return
			}
		}
		ips = append(ips, a)
	}
	for _, ip := range p.Status.PodIPs {
		add(ip.IP)
	}
	if len(ips) == 0 && p.Status.PodIP != "" {
		add(p.Status.PodIP)
	}
	return ips
}

func appendNamedPorts(out []NamedPort, ports []corev1.ContainerPort) []NamedPort {
	for _, cp := range ports {
		if cp.Name == "" || cp.ContainerPort < 1 || cp.ContainerPort > 65535 {
			continue
		}
		proto, ok := protocolFromAPI(cp.Protocol)
		if !ok {
			continue
		}
		out = append(out, NamedPort{Name: intern(cp.Name), Protocol: proto, Port: uint16(cp.ContainerPort)})
	}
	return out
}

// protocolFromAPI maps an API protocol to its number; empty is TCP, the
// default of both ContainerPort and NetworkPolicyPort.
func protocolFromAPI(p corev1.Protocol) (Protocol, bool) {
	switch p {
	case "", corev1.ProtocolTCP:
		return TCP, true
	case corev1.ProtocolUDP:
		return UDP, true
	case corev1.ProtocolSCTP:
		return SCTP, true
	}
	return 0, false
}

// NamespaceFromAPI keeps a namespace's name and labels. The API server
// gives every namespace the label kubernetes.io/metadata.name; it is kept
// like any other.
func NamespaceFromAPI(ns *corev1.Namespace) Namespace {
	return Namespace{Name: intern(ns.Name), Labels: internLabels(ns.Labels)}
}

// NodeFromAPI keeps a node's name, its labels (ClusterNetworkPolicy's
// nodes peers select by them) and its internal and external addresses,
// the ones its traffic to its own pods may come from and the ones a
// nodes peer means ("the IPs present in the node.Status.Addresses
// field": the other address types are names).
func NodeFromAPI(n *corev1.Node) Node {
	out := Node{Name: intern(n.Name), Labels: internLabels(n.Labels)}
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err != nil {
			continue
		}
		ip = ip.Unmap().WithZone("")
		dup := false
		for _, b := range out.IPs {
			dup = dup || b == ip
		}
		if !dup {
			out.IPs = append(out.IPs, ip)
		}
	}
	return out
}

func intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}

func internLabels(in map[string]string) map[string]string {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[intern(k)] = intern(v)
	}
	return out
}
