package k8s_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/kube"
	"github.com/podnet/podnet/ipam/store/kube/kubehttp"
	"github.com/podnet/podnet/nodeclean/kubeclean"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// requestLog records the RBAC verb and resource of every request a
// client sends.
type requestLog struct {
	mu   sync.Mutex
	seen map[string]bool // "verb resource"
}

func (l *requestLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		l.mu.Lock()
		l.seen[rbacVerb(r)] = true
		l.mu.Unlock()
		return rt.RoundTrip(r)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// rbacVerb names a request as an RBAC rule would: "get nodes",
// "update podnet.io/ipamblocks".
func rbacVerb(r *http.Request) string {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	var group, resource string
	named := false
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		resource, named = parts[2], len(parts) > 3
	case len(parts) >= 4 && parts[0] == "apis":
		group, resource, named = parts[1], parts[3], len(parts) > 4
	}
	verb := map[string]string{"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[r.Method]
	if r.Method == "GET" && !named {
		verb = "list"
	}
	if group != "" {
		resource = group + "/" + resource
	}
	return verb + " " + resource
}

// ruleVerbs are the "verb resource" pairs rules grant.
func ruleVerbs(rules []rbacv1.PolicyRule) map[string]bool {
	out := map[string]bool{}
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				if g != "" {
					res = g + "/" + res
				}
				for _, v := range r.Verbs {
					out[v+" "+res] = true
				}
			}
		}
	}
	return out
}

// uninstallRBAC applies deploy/kubernetes/uninstall's ServiceAccount,
// ClusterRole and binding as shipped and returns the role.
func uninstallRBAC(ctx context.Context, t *testing.T, c *cluster.Cluster) *rbacv1.ClusterRole {
	dir := filepath.Join(c.ModuleRoot, "deploy", "kubernetes", "uninstall")
	var role *rbacv1.ClusterRole
	for _, f := range []string{"serviceaccount.yaml", "rbac.yaml"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(data), "\n---\n") {
			obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			switch o := obj.(type) {
			case *corev1.ServiceAccount:
				_, err = c.Client.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
			case *rbacv1.ClusterRole:
				role = o
				_, err = c.Client.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
			case *rbacv1.ClusterRoleBinding:
				_, err = c.Client.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
			default:
				err = fmt.Errorf("unexpected %T", obj)
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
		}
	}
	if role == nil {
		t.Fatal("no ClusterRole in rbac.yaml")
	}
	return role
}

// TestUninstallAPI: `podnet uninstall --datastore kubernetes --ipam
// blocks`'s API part (kubeclean) against a real kube-apiserver with the
// podnet.io CRDs, as the uninstall DaemonSet's service account with its
// shipped RBAC: the node's podnet.io/ annotations go and others stay,
// its IPAMNode goes and its blocks are let go while another node's stay,
// a second run sends no write, and every request it sent is one the
// ClusterRole grants, and every grant is used.
func TestUninstallAPI(t *testing.T) {
	c := cluster.Start(t, cluster.WithControlPlaneOnly())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := c.ApplyIPAMCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	role := uninstallRBAC(ctx, t, c)
	admin := seedUninstallAPI(ctx, t, c)

	log := &requestLog{seen: map[string]bool{}}
	sa := rest.CopyConfig(c.Config)
	sa.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:kube-system:podnet-uninstall"}
	sa.Wrap(log.wrap)
	cfg := kubeclean.Config{REST: sa, Node: "n1", Blocks: true}
	done, err := kubeclean.Remove(ctx, cfg)
	if err != nil {
		t.Fatalf("as the uninstall account: %v", err)
	}
	t.Logf("removed %q", done)
	if len(done) != 3 {
		t.Errorf("removed %q, want two annotations and the IPAMNode", done)
	}
	n1, err := c.Client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"example.com/keep": "yes"}; !maps.Equal(n1.Annotations, want) {
		t.Errorf("n1's annotations %v, want %v", n1.Annotations, want)
	}
	n2, err := c.Client.CoreV1().Nodes().Get(ctx, "n2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(n2.Annotations) != 3 {
		t.Errorf("n2's annotations %v: another node's must stay", n2.Annotations)
	}
	if _, err := admin.Get(ctx, ipam.Keys{Prefix: ipam.DefaultPrefix}.Node("n1")); !errors.Is(err, ipam.ErrNotFound) {
		t.Errorf("n1's IPAMNode: %v, want it gone", err)
	}
	if _, err := admin.Get(ctx, ipam.Keys{Prefix: ipam.DefaultPrefix}.Node("n2")); err != nil {
		t.Errorf("n2's IPAMNode: %v, want it kept", err)
	}
	left, err := kubeclean.Left(ctx, cfg)
	if err != nil || len(left) != 0 {
		t.Errorf("left after removal: %q %v", left, err)
	}
	again, err := kubeclean.Remove(ctx, cfg)
	if err != nil || len(again) != 0 {
		t.Errorf("second removal: %q %v", again, err)
	}
	checkSentVerbs(t, log.seen, role.Rules)
}

// seedUninstallAPI makes two Nodes, n1 and n2, as podnet's agent and
// block IPAM leave them: podnet.io/ annotations beside another, and an
// IPAMNode each with a block holding a pod's address and an empty one
// (the first is let go on removal, the second deleted). It returns the
// admin's store.
func seedUninstallAPI(ctx context.Context, t *testing.T, c *cluster.Cluster) *kube.Store {
	t.Helper()
	for _, n := range []string{"n1", "n2"} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Annotations: map[string]string{
			"podnet.io/underlay-address": "198.18.0.1", "podnet.io/vtep-mac": "0e:00:00:00:00:01", "example.com/keep": "yes"}}}
		if _, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	admin, err := kubehttp.Open(c.Config, nil, kube.Options{Kubeconfig: "admin", Prefix: ipam.DefaultPrefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	a := ipam.New(admin, ipam.Config{Keys: ipam.Keys{Prefix: ipam.DefaultPrefix}})
	for i, p := range []string{"busy", "idle"} {
		if err := a.PutPool(ctx, ipam.Pool{Name: p, CIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 77 + byte(i), 0, 0}), 16), BlockSize: 26}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"n1", "n2"} {
		if _, err := a.AutoAssign(ctx, ipam.AutoAssignArgs{Handle: "h." + n, Node: n, Num4: 1, Pools4: []string{"busy"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.AutoAssign(ctx, ipam.AutoAssignArgs{Handle: "gone." + n, Node: n, Num4: 1, Pools4: []string{"idle"}}); err != nil {
			t.Fatal(err)
		}
		if err := a.ReleaseByHandle(ctx, n, "gone."+n); err != nil {
			t.Fatal(err)
		}
	}
	return admin
}

// checkSentVerbs: every request sent is one the rules grant, and every
// grant is used.
func checkSentVerbs(t *testing.T, sent map[string]bool, rules []rbacv1.PolicyRule) {
	t.Helper()
	granted := ruleVerbs(rules)
	t.Logf("sent %v", slices.Sorted(maps.Keys(sent)))
	for v := range sent {
		if !granted[v] {
			t.Errorf("sent %q, which rbac.yaml does not grant", v)
		}
	}
	for v := range granted {
		if !sent[v] {
			t.Errorf("rbac.yaml grants %q, which removal never sends", v)
		}
	}
}
