package kubeapi

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podnet/podnet/agent/clusterstate"
)

// The annotations that are a node's registration in the Kubernetes
// datastore, as flannel keeps its own: the agent writes them on its Node
// and every agent reads them from every Node. The VTEP IP is the underlay
// address (see the VTEP scheme in doc.go), so it needs none.
const (
	AnnotationPrefix          = "podnet.io/"
	AnnotationUnderlayAddress = AnnotationPrefix + "underlay-address"
	AnnotationVTEPMAC         = AnnotationPrefix + "vtep-mac"
	AnnotationLinkLocal6      = AnnotationPrefix + "link-local6"
	AnnotationRoutingMode     = AnnotationPrefix + "routing-mode"
	// AnnotationWireGuardKey is the node's WireGuard public key (base64),
	// with encryption on. An older agent ignores it; a malformed one is
	// not an unreadable Node: only its WireGuard peer is skipped.
	AnnotationWireGuardKey = AnnotationPrefix + "wireguard-public-key"
	// AnnotationFormat is the version of the annotations' format;
	// absent: 1. This agent writes format 1, so it writes none, and
	// removes a newer agent's from its own Node, whose other
	// annotations it rewrites in its own format.
	AnnotationFormat = AnnotationPrefix + "format"
)

// AnnotationFormatVersion is the format of the podnet.io annotations this
// agent writes and reads. A newer format may add keys (this agent ignores
// keys it does not know) and bumps the version when a known key's value
// changes meaning.
const AnnotationFormatVersion = 1

// managedAnnotations are the annotations the agent owns on its Node: it
// sets them, and removes one it no longer has a value for.
var managedAnnotations = []string{AnnotationUnderlayAddress, AnnotationVTEPMAC, AnnotationLinkLocal6, AnnotationRoutingMode, AnnotationWireGuardKey, AnnotationFormat}

// UnreadableAnnotations says why another node's podnet.io annotations
// cannot be read by this agent: a format newer than
// AnnotationFormatVersion, or a value of a known key that does not parse
// (a newer format's, or a hand edit). Missing annotations are no error:
// that node's agent has not registered yet, and it is routed by its
// InternalIP (NodeRecordFromNode).
func UnreadableAnnotations(n *corev1.Node) error {
	a := n.Annotations
	if f, ok := a[AnnotationFormat]; ok {
		v, err := strconv.Atoi(f)
		if err != nil || v < 1 {
			return fmt.Errorf("annotation %s %q: want a format version such as %d", AnnotationFormat, f, AnnotationFormatVersion)
		}
		if v > AnnotationFormatVersion {
			return fmt.Errorf("annotation %s %q: a newer podnet's format; this agent reads %d", AnnotationFormat, f, AnnotationFormatVersion)
		}
	}
	if v, ok := a[AnnotationUnderlayAddress]; ok {
		if ip, err := netip.ParseAddr(v); err != nil || !ip.Is4() {
			return fmt.Errorf("annotation %s %q: want an IPv4 address", AnnotationUnderlayAddress, v)
		}
	}
	if v, ok := a[AnnotationVTEPMAC]; ok {
		if mac, err := net.ParseMAC(v); err != nil || len(mac) != 6 {
			return fmt.Errorf("annotation %s %q: want a MAC address", AnnotationVTEPMAC, v)
		}
	}
	if v, ok := a[AnnotationLinkLocal6]; ok {
		if ip, err := netip.ParseAddr(v); err != nil || !ip.Is6() || !ip.IsLinkLocalUnicast() {
			return fmt.Errorf("annotation %s %q: want an IPv6 link-local address", AnnotationLinkLocal6, v)
		}
	}
	return nil
}

// NodeRecordFromNode is the routing record of a Node: its podnet.io
// annotations, or for a node whose agent has not annotated it yet, its
// first IPv4 InternalIP and the VTEP MAC its name gives. ok is false when
// the Node has no usable IPv4 address at all: nothing can be routed to
// it.
func NodeRecordFromNode(n *corev1.Node) (rec clusterstate.NodeRecord, ok bool) {
	rec.Name = n.Name
	if a, err := netip.ParseAddr(n.Annotations[AnnotationUnderlayAddress]); err == nil && a.Is4() {
		rec.Address = a
	} else {
		rec.Address = internalIPv4(n)
	}
	if !rec.Address.IsValid() {
		return rec, false
	}
	rec.VTEPIP = rec.Address
	if mac, err := net.ParseMAC(n.Annotations[AnnotationVTEPMAC]); err == nil && len(mac) == 6 {
		rec.VTEPMAC = mac.String()
	} else {
		rec.VTEPMAC = clusterstate.VTEPMAC(n.Name).String()
	}
	if a, err := netip.ParseAddr(n.Annotations[AnnotationLinkLocal6]); err == nil && a.Is6() && a.IsLinkLocalUnicast() {
		rec.LinkLocal6 = a
	}
	rec.Mode = n.Annotations[AnnotationRoutingMode]
	rec.WireGuardKey = n.Annotations[AnnotationWireGuardKey]
	return rec, true
}

func internalIPv4(n *corev1.Node) netip.Addr {
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Unmap().Is4() {
			return ip.Unmap()
		}
	}
	return netip.Addr{}
}

// PodCIDRsOf returns the Node's spec.podCIDRs (spec.podCIDR when the list
// is empty, as an older control plane writes it), masked, without
// duplicates, skipping any that do not parse.
func PodCIDRsOf(n *corev1.Node) []netip.Prefix {
	in := n.Spec.PodCIDRs
	if len(in) == 0 && n.Spec.PodCIDR != "" {
		in = []string{n.Spec.PodCIDR}
	}
	var out []netip.Prefix
	for _, s := range in {
		p, err := netip.ParsePrefix(s)
		if err != nil || p.Addr().Is4In6() {
			continue
		}
		if p = p.Masked(); !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// NodeAnnotations are the annotations that register rec.
func NodeAnnotations(rec clusterstate.NodeRecord) map[string]string {
	out := map[string]string{
		AnnotationUnderlayAddress: rec.Address.String(),
		AnnotationVTEPMAC:         rec.VTEPMAC,
	}
	if rec.LinkLocal6.IsValid() {
		out[AnnotationLinkLocal6] = rec.LinkLocal6.String()
	}
	if rec.Mode != "" {
		out[AnnotationRoutingMode] = rec.Mode
	}
	if rec.WireGuardKey != "" {
		out[AnnotationWireGuardKey] = rec.WireGuardKey
	}
	return out
}

// annotationPatch is the JSON merge patch that makes have's managed
// annotations want: only the keys that differ, a null for a managed key
// want lacks; nil when nothing differs, so a node already registered
// costs no write.
func annotationPatch(have, want map[string]string) []byte {
	diff := map[string]any{}
	for _, k := range managedAnnotations {
		w, inWant := want[k]
		h, inHave := have[k]
		switch {
		case inWant && (!inHave || h != w):
			diff[k] = w
		case !inWant && inHave:
			diff[k] = nil
		}
	}
	if len(diff) == 0 {
		return nil
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": diff}})
	return b
}

// slimNode is the informer's transform: of a Node it keeps only what
// NodeRecordFromNode, PodCIDRsOf and annotationPatch read, so that the
// cache of a large cluster holds a few hundred bytes per node instead of
// its images, conditions and managed fields.
func slimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil // a tombstone: its object was slimmed when cached
	}
	out := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion},
		Spec:       corev1.NodeSpec{PodCIDR: n.Spec.PodCIDR, PodCIDRs: n.Spec.PodCIDRs},
	}
	for k, v := range n.Annotations {
		if strings.HasPrefix(k, AnnotationPrefix) {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			out.Status.Addresses = append(out.Status.Addresses, a)
		}
	}
	return out, nil
}
