package kubeapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podnet/podnet/agent/clusterstate"
)

func kubeNode(name string, annotations map[string]string, internal []string, podCIDRs ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}
	n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: name})
	for _, a := range internal {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
	}
	n.Spec.PodCIDRs = podCIDRs
	if len(podCIDRs) > 0 {
		n.Spec.PodCIDR = podCIDRs[0]
	}
	return n
}

func TestNodeRecordFromNode(t *testing.T) {
	mac := "02:aa:bb:cc:dd:ee"
	tests := []struct {
		name string
		node *corev1.Node
		ok   bool
		want clusterstate.NodeRecord
	}{
		{"annotated", kubeNode("a", map[string]string{
			AnnotationUnderlayAddress: "198.18.0.11", AnnotationVTEPMAC: mac, AnnotationLinkLocal6: "fe80::a",
		}, []string{"10.0.0.1"}), true, clusterstate.NodeRecord{Name: "a", Address: addr("198.18.0.11"), VTEPIP: addr("198.18.0.11"), VTEPMAC: mac, LinkLocal6: addr("fe80::a")}},
		// The agent has not annotated it yet: its kubelet's address, and
		// the VTEP MAC every node computes from the name.
		{"InternalIP fallback", kubeNode("b", nil, []string{"fd00::b", "198.18.0.12"}), true,
			clusterstate.NodeRecord{Name: "b", Address: addr("198.18.0.12"), VTEPIP: addr("198.18.0.12"), VTEPMAC: clusterstate.VTEPMAC("b").String()}},
		{"bad annotations fall back", kubeNode("c", map[string]string{
			AnnotationUnderlayAddress: "fd00::c", AnnotationVTEPMAC: "01:00:5e", AnnotationLinkLocal6: "fd00::1",
		}, []string{"198.18.0.13"}), true, clusterstate.NodeRecord{Name: "c", Address: addr("198.18.0.13"), VTEPIP: addr("198.18.0.13"), VTEPMAC: clusterstate.VTEPMAC("c").String()}},
		{"no IPv4 at all", kubeNode("d", nil, []string{"fd00::d"}), false, clusterstate.NodeRecord{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := NodeRecordFromNode(tt.node)
			if ok != tt.ok || (ok && got != tt.want) {
				t.Fatalf("got %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestPodCIDRsOf(t *testing.T) {
	tests := []struct {
		name string
		node *corev1.Node
		want []netip.Prefix
	}{
		{"none", kubeNode("a", nil, nil), nil},
		{"dual-stack", kubeNode("a", nil, nil, "10.244.1.0/24", "fd00:10:244:1::/64"), []netip.Prefix{pfx("10.244.1.0/24"), pfx("fd00:10:244:1::/64")}},
		{"podCIDR only", &corev1.Node{Spec: corev1.NodeSpec{PodCIDR: "10.244.2.0/24"}}, []netip.Prefix{pfx("10.244.2.0/24")}},
		{"unmasked, duplicate, garbage", kubeNode("a", nil, nil, "10.244.3.7/24", "10.244.3.0/24", "nonsense", "::ffff:10.0.0.0/120"), []netip.Prefix{pfx("10.244.3.0/24")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := PodCIDRsOf(tt.node); !slices.Equal(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestAnnotationPatch(t *testing.T) {
	rec := clusterstate.NodeRecord{Name: "a", Address: addr("198.18.0.11"), VTEPIP: addr("198.18.0.11"), VTEPMAC: "02:aa:bb:cc:dd:ee"}
	want := NodeAnnotations(rec)
	tests := []struct {
		name string
		have map[string]string
		want map[string]any // the patch's annotations; nil: no patch
	}{
		{"fresh Node", map[string]string{"other": "x"}, map[string]any{
			AnnotationUnderlayAddress: "198.18.0.11", AnnotationVTEPMAC: "02:aa:bb:cc:dd:ee"}},
		{"registered", map[string]string{"other": "x", AnnotationUnderlayAddress: "198.18.0.11", AnnotationVTEPMAC: "02:aa:bb:cc:dd:ee"}, nil},
		// The underlay lost IPv6 since the last start: the stale next hop
		// goes, the rest is not written again; others' keys are untouched.
		{"changed", map[string]string{AnnotationUnderlayAddress: "198.18.0.99", AnnotationVTEPMAC: "02:aa:bb:cc:dd:ee",
			AnnotationLinkLocal6: "fe80::1", AnnotationPrefix + "other": "kept"},
			map[string]any{AnnotationUnderlayAddress: "198.18.0.11", AnnotationLinkLocal6: nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := annotationPatch(tt.have, want)
			if tt.want == nil {
				if b != nil {
					t.Fatalf("patch %s, want none", b)
				}
				return
			}
			var doc struct {
				Metadata struct {
					Annotations map[string]any `json:"annotations"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(b, &doc); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(doc.Metadata.Annotations, tt.want) {
				t.Fatalf("patch %s, want annotations %v", b, tt.want)
			}
		})
	}
	rec.LinkLocal6 = addr("fe80::a")
	if got := NodeAnnotations(rec)[AnnotationLinkLocal6]; got != "fe80::a" {
		t.Fatalf("link-local6 annotation %q", got)
	}
}

func TestSlimNode(t *testing.T) {
	n := kubeNode("a", map[string]string{AnnotationVTEPMAC: "02:aa:bb:cc:dd:ee", "kubeadm.alpha.kubernetes.io/cri-socket": "x"},
		[]string{"198.18.0.11"}, "10.244.1.0/24")
	n.Status.Images = []corev1.ContainerImage{{Names: []string{"big"}}}
	n.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
	obj, err := slimNode(n)
	if err != nil {
		t.Fatal(err)
	}
	s := obj.(*corev1.Node)
	if len(s.Annotations) != 1 || s.Status.Images != nil || s.ManagedFields != nil || len(s.Status.Addresses) != 1 {
		t.Fatalf("slimmed Node keeps %+v", s)
	}
	r1, ok1 := NodeRecordFromNode(n)
	r2, ok2 := NodeRecordFromNode(s)
	if r1 != r2 || ok1 != ok2 || !slices.Equal(PodCIDRsOf(n), PodCIDRsOf(s)) {
		t.Fatalf("slimming changed what the Node says: %+v / %+v", r1, r2)
	}
	tomb := "not a node"
	if got, _ := slimNode(tomb); got != tomb {
		t.Fatalf("non-Node changed: %v", got)
	}
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// TestCountingTransport: the agent's API requests are counted by verb,
// a watch and a list told apart from a GET.
func TestCountingTransport(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPatch {
			w.WriteHeader(http.StatusForbidden)
		}
	}))
	defer srv.Close()
	n := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x"}, []string{"verb", "code"})
	hc := &http.Client{Transport: &countingTransport{rt: http.DefaultTransport, n: n}}
	for _, req := range []struct{ method, path string }{
		{"GET", "/api/v1/nodes?limit=500"}, {"GET", "/api/v1/nodes?watch=true&resourceVersion=5"},
		{"GET", "/api/v1/nodes/a"}, {"PATCH", "/api/v1/nodes/a"},
	} {
		r, _ := http.NewRequest(req.method, srv.URL+req.path, nil)
		resp, err := hc.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	for _, want := range [][2]string{{"LIST", "200"}, {"WATCH", "200"}, {"GET", "200"}, {"PATCH", "403"}} {
		if got := testutil.ToFloat64(n.WithLabelValues(want[0], want[1])); got != 1 {
			t.Errorf("%s %s counted %v times, want 1", want[0], want[1], got)
		}
	}
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// TestWireGuardKeyAnnotation: the public key is published and read back
// as written; a malformed one does not make the Node unreadable (only
// its WireGuard peer is skipped, agent/wireguard), and no key, no
// annotation.
func TestWireGuardKeyAnnotation(t *testing.T) {
	rec := clusterstate.NodeRecord{Name: "n1", Address: netip.MustParseAddr("198.18.0.11"), VTEPMAC: "02:00:00:00:00:01",
		WireGuardKey: "HldFxJj+E2PSlWD5zl7zTHJxfQp1OnT0TrlmpZKG1ks="}
	a := NodeAnnotations(rec)
	if a[AnnotationWireGuardKey] != rec.WireGuardKey {
		t.Fatalf("annotations %v: no %s", a, AnnotationWireGuardKey)
	}
	for _, key := range []string{rec.WireGuardKey, "not base64!"} {
		a[AnnotationWireGuardKey] = key
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: a}}
		if err := UnreadableAnnotations(n); err != nil {
			t.Errorf("key %q: %v", key, err)
		}
		got, ok := NodeRecordFromNode(n)
		if !ok || got.WireGuardKey != key {
			t.Errorf("key %q: record %+v", key, got)
		}
	}
	rec.WireGuardKey = ""
	if _, ok := NodeAnnotations(rec)[AnnotationWireGuardKey]; ok {
		t.Error("no key, yet an annotation")
	}
}
