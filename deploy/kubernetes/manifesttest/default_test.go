package manifesttest

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"path"
	"reflect"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/install"
)

// The default's agent runs against the API with exactly these rights on
// nodes, and no others.
var nodeVerbs = []string{"list", "watch", "patch"}

// policyRules are the rights of the policy service (agent --network-policy):
// its informers of Namespaces, Pods, NetworkPolicies and
// ClusterNetworkPolicies (every Node's is within nodeVerbs).
var policyRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"namespaces", "pods"}, Verbs: []string{"list", "watch"}},
	{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"list", "watch"}},
	{APIGroups: []string{"policy.networking.k8s.io"}, Resources: []string{"clusternetworkpolicies"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"policy.networking.k8s.io"}, Resources: []string{"clusternetworkpolicies/status"}, Verbs: []string{"patch"}},
}

// eventsRule is the agent's right to record Events (agent/kubeevents),
// with network policy or block IPAM: they are the ones that record any.
var eventsRule = rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}}

// TestDaemonSet checks the default DaemonSet: what every podnet
// DaemonSet must be, an agent on the Kubernetes datastore with only the
// rights it uses, and a store the plugins on the host and the agent in
// its container both find at the same path.
func TestDaemonSet(t *testing.T) {
	p := loadPodFrom(t, defaultDir)
	if len(p.m.clusterRoles) != 1 || len(p.m.roleBindings) != 1 {
		t.Fatalf("%d ClusterRoles, %d ClusterRoleBindings; want one each", len(p.m.clusterRoles), len(p.m.roleBindings))
	}
	runChecks(t, p, append(podChecks(),
		podCheck{"API access for nodes alone", kubeRBACCheck},
		podCheck{"agent on the Kubernetes datastore", func(t *testing.T, p *pod) {
			if v, _ := flagValue(argv(p.agent), "datastore"); v != "kubernetes" {
				t.Errorf("agent --datastore=%q, want kubernetes", v)
			}
			for _, f := range []string{"etcd-cert", "etcd-key", "etcd-ca", "kubeconfig"} {
				if _, ok := flagValue(argv(p.agent), f); ok {
					t.Errorf("agent --%s: the in-cluster config is the agent's only credential", f)
				}
			}
			if _, err := clusterCIDRs(t, p); err != nil {
				t.Error(err)
			}
		}},
		podCheck{"agent enforces NetworkPolicy", networkPolicyCheck},
		podCheck{"node-local store on the host's path", func(t *testing.T, p *pod) {
			store, _ := p.expandedFlag(t, p.agent, "store")
			file, ok := strings.CutPrefix(store, "bolt:")
			if !ok || !path.IsAbs(file) {
				t.Fatalf("agent --store=%q: want bolt:/ABSOLUTE/PATH", store)
			}
			// The plugin opens the path the config names on the host; the
			// agent's GC opens it in its container.
			vm, vol := p.volumeAt(p.agent, file)
			switch {
			case vol == nil || vol.HostPath == nil:
				t.Errorf("--store %s: not on a hostPath volume", file)
			case vm.MountPath != path.Clean(vol.HostPath.Path):
				t.Errorf("--store %s: mounted at %s from the host's %s; the plugin and the agent must see one path", file, vm.MountPath, vol.HostPath.Path)
			case vm.ReadOnly:
				t.Errorf("--store %s: read-only", file)
			}
		}},
	))
}

// kubeRBACCheck: the pod mounts its token, and its account is bound to
// one ClusterRole that lists, watches and patches nodes, nothing else.
func kubeRBACCheck(t *testing.T, p *pod) {
	if p.spec.AutomountServiceAccountToken == nil || !*p.spec.AutomountServiceAccountToken {
		t.Error("automountServiceAccountToken is not true on the pod: the agent needs its token")
	}
	if p.m.serviceAccounts[p.spec.ServiceAccountName] == nil {
		t.Fatalf("serviceAccountName %q: not among the manifests", p.spec.ServiceAccountName)
	}
	for _, b := range p.m.roleBindings {
		sa := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: p.spec.ServiceAccountName, Namespace: namespace}
		if !reflect.DeepEqual(b.Subjects, []rbacv1.Subject{sa}) {
			t.Errorf("ClusterRoleBinding %s binds %+v, want the agent's account alone", b.Name, b.Subjects)
		}
		role := p.m.clusterRoles[b.RoleRef.Name]
		if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.APIGroup != rbacv1.GroupName || role == nil {
			t.Fatalf("ClusterRoleBinding %s: roleRef %+v is not a ClusterRole of the manifests", b.Name, b.RoleRef)
		}
		want := append([]rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: nodeVerbs}, eventsRule}, policyRules...)
		if !reflect.DeepEqual(role.Rules, want) || role.AggregationRule != nil {
			t.Errorf("ClusterRole %s: rules %+v, want %+v", role.Name, role.Rules, want)
		}
	}
}

// clusterCIDRs is the agent's --cluster-cidr, from the ConfigMap.
func clusterCIDRs(t *testing.T, p *pod) ([]netip.Prefix, error) {
	v, _ := p.expandedFlag(t, p.agent, "cluster-cidr")
	var out []netip.Prefix
	for _, s := range strings.Split(v, ",") {
		c, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil || c != c.Masked() {
			return nil, fmt.Errorf("agent --cluster-cidr=%q: want network prefixes, comma-separated", v)
		}
		out = append(out, c)
	}
	return out, nil
}

// TestNetworkConfig: the default's shipped conflist leaves to the agent
// what differs per node, and what the agent makes of it is a config
// podnet-ipam accepts, with the node's pool in its local store and the
// cluster CIDR never masqueraded, otherwise as podnet install writes it.
func TestNetworkConfig(t *testing.T) {
	c := conflistOf(t, defaultDir)
	list, err := cni.ParseNetworkConfigList(c.shipped, "ConfigMap key "+c.key)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Plugins []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(c.shipped, &doc); err != nil || len(doc.Plugins) == 0 {
		t.Fatalf("plugins: %v", err)
	}
	ipam, _ := doc.Plugins[0]["ipam"].(map[string]any)
	for _, k := range []string{"node", "pools", "store"} {
		if _, ok := ipam[k]; ok {
			t.Errorf("ipam.%s in the ConfigMap: the agent sets it per node", k)
		}
	}
	if _, ok := doc.Plugins[0]["masqExclude"]; ok {
		t.Error("masqExclude in the ConfigMap: the agent sets it from cluster_cidr")
	}

	main, req := c.installed(t)
	cidrs, _ := clusterCIDRs(t, c.p)
	store, _ := c.p.expandedFlag(t, c.p.agent, "store")
	if len(req.Pools) != 1 || req.Pools[0].CIDR != c.podCIDRs[0] || req.Config.Store != store || req.Config.Node != renderNode {
		t.Errorf("installed ipam: pools %+v, store %q, node %q; want the pool %s in %s on %s", req.Pools, req.Config.Store, req.Config.Node, c.podCIDRs[0], store, renderNode)
	}
	if got, want := main["masqExclude"], []any{cidrs[0].String()}; !reflect.DeepEqual(got, want) {
		t.Errorf("installed masqExclude %v, want the cluster CIDR %v", got, want)
	}

	ipMasq, _ := main["ipMasq"].(bool)
	mode, _ := main["mode"].(string)
	gen, err := install.ConfList(install.Network{Name: list.Name, Mode: mode, IPMasq: &ipMasq, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	var genDoc struct {
		Plugins []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(gen, &genDoc); err != nil {
		t.Fatal(err)
	}
	for _, m := range []map[string]any{main, genDoc.Plugins[0]} {
		delete(m, "ipam")
		delete(m, "masqExclude")
	}
	if len(list.Plugins) != len(genDoc.Plugins) || !reflect.DeepEqual(main, genDoc.Plugins[0]) {
		t.Errorf("the installed conflist's plugins are not what podnet install writes:\n%v\n%v", main, genDoc.Plugins)
	}
}

// networkPolicyCheck: the agent runs the policy service, which the
// Kubernetes datastore variants ship on (RBAC: policyRules); the flag is
// a switch, never --network-policy=false.
func networkPolicyCheck(t *testing.T, p *pod) {
	args := argv(p.agent)
	on := slices.Contains(args, "--network-policy") || slices.Contains(args, "--network-policy=true")
	if !on || slices.Contains(args, "--network-policy=false") {
		t.Errorf("agent without --network-policy: NetworkPolicies would not be enforced")
	}
}
