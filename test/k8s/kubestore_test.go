package k8s

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/kube"
	"github.com/podnet/podnet/ipam/store/storetest"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// kubeStoreCluster starts etcd and kube-apiserver alone, applies
// deploy/kubernetes/crds and writes a JSON kubeconfig for the store (the
// admin identity: this tests the store, not RBAC).
func kubeStoreCluster(t testing.TB) (*cluster.Cluster, string) {
	c := cluster.Start(t, cluster.WithControlPlaneOnly())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.ApplyIPAMCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(c.Dir, "store.kubeconfig")
	if err := c.WriteJSONKubeconfig(kc); err != nil {
		t.Fatal(err)
	}
	return c, kc
}

func openKubeStore(t testing.TB, c *cluster.Cluster, kc, prefix string) *kube.Store {
	t.Helper()
	s, err := kube.Open(kube.Options{Kubeconfig: kc, Prefix: prefix, Dial: c.Nodes[0].DialContext})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func podnetResource(plural string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: kube.Group, Version: kube.Version, Resource: plural}
}

// TestKubeStore: ipam/store/kube against a real kube-apiserver with the
// shipped CRDs: the store suite on the allocator's keys, isolation of
// key prefixes, labels, and the API's own validation reported clearly.
func TestKubeStore(t *testing.T) {
	c, kc := kubeStoreCluster(t)
	dc, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("Suite", func(t *testing.T) {
		storetest.RunWrites(t, func(t *testing.T, prefix string) ipam.Store {
			return openKubeStore(t, c, kc, prefix)
		}, storetest.IPAMShape())
	})
	t.Run("PrefixesAndLabels", func(t *testing.T) { testKubeStorePrefixes(t, c, kc, dc) })
	t.Run("APIValidation", func(t *testing.T) { testKubeStoreValidation(t, c, kc, dc) })
	t.Run("Unreachable", func(t *testing.T) { testKubeStoreUnreachable(t, c, kc) })
}

func blockValue(t *testing.T, cidr, node string, mod func(*ipam.Block)) []byte {
	t.Helper()
	b := ipam.NewBlock(netip.MustParsePrefix(cidr), ipam.HostAffinity(node))
	if mod != nil {
		mod(b)
	}
	v, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// testKubeStorePrefixes: the default prefix and a test prefix hold the
// same key apart; each object carries the labels derived from it.
func testKubeStorePrefixes(t *testing.T, c *cluster.Cluster, kc string, dc dynamic.Interface) {
	ctx := t.Context()
	def := openKubeStore(t, c, kc, "")
	set := openKubeStore(t, c, kc, "/kubestore-test/")
	cidr := "10.250.0.64/26"
	dk := ipam.Keys{}.Block(netip.MustParsePrefix(cidr))
	sk := ipam.Keys{Prefix: "/kubestore-test/"}.Block(netip.MustParsePrefix(cidr))
	if _, err := def.Write(ctx, ipam.Write{Key: dk, Value: blockValue(t, cidr, "node-a", nil)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		def.Write(context.Background(), ipam.Write{Key: dk, ModRevision: ipam.AnyRevision, Delete: true})
	})
	if _, err := set.Write(ctx, ipam.Write{Key: sk, Value: blockValue(t, cidr, "node-b", nil)}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		s    *kube.Store
		key  string
		node string
	}{{def, dk, "node-a"}, {set, sk, "node-b"}} {
		kvs, err := tt.s.List(ctx, strings.TrimSuffix(tt.key, "10.250.0.64-26"))
		if err != nil || len(kvs) != 1 || kvs[0].Key != tt.key || !strings.Contains(string(kvs[0].Value), "host:"+tt.node) {
			t.Fatalf("List = %+v %v, want %s only, affine to %s", kvs, err, tt.key, tt.node)
		}
	}
	blocks := dc.Resource(podnetResource("ipamblocks"))
	list, err := blocks.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range list.Items {
		if !strings.HasSuffix(o.GetName(), "10-250-0-64-26") {
			continue // the suite's
		}
		names = append(names, o.GetName())
		want := map[string]string{kube.LabelNode: "node-a"}
		if o.GetName() != "10-250-0-64-26" {
			want = map[string]string{kube.LabelNode: "node-b", kube.LabelSet: o.GetLabels()[kube.LabelSet]}
			if len(o.GetLabels()[kube.LabelSet]) != 10 || o.GetName() != o.GetLabels()[kube.LabelSet]+".10-250-0-64-26" {
				t.Errorf("set object %s, labels %v", o.GetName(), o.GetLabels())
			}
		}
		if !equalLabels(o.GetLabels(), want) {
			t.Errorf("%s: labels %v, want %v", o.GetName(), o.GetLabels(), want)
		}
	}
	if len(names) != 2 {
		t.Errorf("blocks %v, want the default one and the set's", names)
	}
}

func equalLabels(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// testKubeStoreValidation: what the CRDs' schemas and CEL rules refuse
// comes back as a kube.APIError carrying the API's message, not as a
// conflict or an outage the allocator would retry; an object whose name
// does not match its CIDR reads as corrupt.
func testKubeStoreValidation(t *testing.T, c *cluster.Cluster, kc string, dc dynamic.Interface) {
	ctx := t.Context()
	prefix := "/kubestore-validation/"
	s := openKubeStore(t, c, kc, prefix)
	keys := ipam.Keys{Prefix: prefix}
	bad := []struct {
		name, key, want string
		value           []byte
	}{
		{"pool with 12 host bits", keys.Pool("p12"), "leave at most 10 host bits",
			[]byte(`{"name":"p12","cidr":"10.251.0.0/16","blockSize":20}`)},
		// A Kubernetes set-based term: ipam.ParseSelector does not take it.
		{"pool with a set-based node selector", keys.Pool("psel"), "nodeSelector must be",
			[]byte(`{"name":"psel","cidr":"10.251.0.0/16","nodeSelector":"zone in (a,b)"}`)},
		{"pool smaller than the default block", keys.Pool("p28"), "needs a blockSize",
			[]byte(`{"name":"p28","cidr":"10.251.0.0/28"}`)},
		// The schema's maxItems refuses it before the CEL rule runs.
		{"block of 1025 owners", keys.Block(netip.MustParsePrefix("10.251.0.0/26")), "spec.owners: Too many: 1025",
			blockValue(t, "10.251.0.0/26", "n", func(b *ipam.Block) { b.Owners = make([]int, 1025) })},
		{"node with an unknown state", keys.Prefix + "ipam/nodes/n1", "spec.blocks[0].state",
			[]byte(`{"node":"n1","blocks":[{"cidr":"10.251.0.0/26","state":"claimed","since":"2026-01-01T00:00:00Z"}]}`)},
	}
	for _, tt := range bad {
		_, err := s.Write(ctx, ipam.Write{Key: tt.key, Value: tt.value})
		var ae *kube.APIError
		if !errors.As(err, &ae) || ae.Code != 422 || !strings.Contains(err.Error(), tt.want) ||
			errors.Is(err, ipam.ErrConflict) || errors.Is(err, ipam.ErrUnavailable) {
			t.Errorf("%s: err = %v, want a 422 APIError saying %q", tt.name, err, tt.want)
		} else {
			t.Logf("%s: %v", tt.name, err)
		}
	}
	// The CEL rule on a CIDR the store itself would never write.
	blocks := dc.Resource(podnetResource("ipamblocks"))
	malformed := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "podnet.io/v1", "kind": "IPAMBlock",
		"metadata": map[string]any{"name": "malformed"}, "spec": map[string]any{"cidr": "10.251.1.0/33"}}}
	if _, err := blocks.Create(ctx, malformed, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "cidr must be a CIDR") {
		t.Errorf("block with cidr 10.251.1.0/33: %v, want the CEL rule's message", err)
	}
	// Named for one block, holding another: corrupt on read.
	wrong := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "podnet.io/v1", "kind": "IPAMBlock",
		"metadata": map[string]any{"name": "10-251-2-0-26"}, "spec": map[string]any{"cidr": "10.251.3.0/26"}}}
	if _, err := blocks.Create(ctx, wrong, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer blocks.Delete(context.Background(), "10-251-2-0-26", metav1.DeleteOptions{})
	def := openKubeStore(t, c, kc, "")
	if _, err := def.Get(ctx, ipam.Keys{}.Block(netip.MustParsePrefix("10.251.2.0/26"))); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("misnamed block: %v, want corrupt", err)
	}
}

// testKubeStoreUnreachable: no API server at the address is
// ErrUnavailable, within the caller's deadline.
func testKubeStoreUnreachable(t *testing.T, c *cluster.Cluster, kc string) {
	data, err := os.ReadFile(kc)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	// A port nothing listens on, in the control plane's namespace.
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), ":6443", ":6449", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	s := openKubeStore(t, c, path, "")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := s.Get(ctx, ipam.Keys{}.Pool("p")); !errors.Is(err, ipam.ErrUnavailable) {
		t.Errorf("unreachable: %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %s, past the deadline", d)
	}
}
