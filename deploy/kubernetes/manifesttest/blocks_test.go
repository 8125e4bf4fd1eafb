package manifesttest

import (
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/podnet/podnet/agent"
	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/install"
	"github.com/podnet/podnet/ipamcni"
)

// The rights of block IPAM on the API, each verb one the code sends
// (docs/design/kubernetes-ipam.md 5.1 is the plan; blocks/rbac.yaml says
// where this differs and why).
var (
	// blocksAgentRules: the agent. Nodes as in the default; the pools it
	// seeds from the conflist (ipam.Allocator.Pools lists, PutPool of a
	// missing pool creates); the IPAMNode informer (list, watch) and its
	// GC of its own node (Repair, CheckNode and ReleaseByHandle read the
	// node's index and blocks by name, update them, create a block a
	// stale claim names, delete a block whose release was under way);
	// RemoveNode of a Node deleted for DeletedNodeGrace (its blocks
	// updated or deleted, its index deleted).
	blocksAgentRules = []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list", "watch", "patch"}},
		{APIGroups: []string{"podnet.io"}, Resources: []string{"ippools"}, Verbs: []string{"list", "create"}},
		{APIGroups: []string{"podnet.io"}, Resources: []string{"ipamnodes"}, Verbs: []string{"get", "list", "watch", "update", "delete"}},
		{APIGroups: []string{"podnet.io"}, Resources: []string{"ipamblocks"}, Verbs: []string{"get", "create", "update", "delete"}},
	}
	// blocksCNIRules: the plugins' ADD, DEL, CHECK and GC. Pools are
	// listed; a node's index and blocks read by name; a claim probes
	// blocks by name, lists them when the probes find none free (and
	// borrowing lists them), creates its block, creates or updates the
	// index; an allocation or release updates a block.
	blocksCNIRules = []rbacv1.PolicyRule{
		{APIGroups: []string{"podnet.io"}, Resources: []string{"ippools"}, Verbs: []string{"list"}},
		{APIGroups: []string{"podnet.io"}, Resources: []string{"ipamnodes"}, Verbs: []string{"get", "create", "update"}},
		{APIGroups: []string{"podnet.io"}, Resources: []string{"ipamblocks"}, Verbs: []string{"get", "list", "create", "update"}},
	}
)

// blocksKubeconfig is where the agent writes the plugins' kubeconfig on
// the host, and so what the conflist's store names.
var blocksKubeconfig = path.Join(hostConfDir, agent.CNIKubeconfigName)

// TestBlocksDaemonSet checks the blocks variant's DaemonSet: what every
// podnet DaemonSet must be, an agent on block IPAM on the API with only
// the rights it uses, plugins with an account of their own and only
// theirs, and the DELs' releases where the agent finds them.
func TestBlocksDaemonSet(t *testing.T) {
	p := loadPodFrom(t, blocksDir)
	runChecks(t, p, append(podChecks(),
		podCheck{"agent on block IPAM on the API", func(t *testing.T, p *pod) {
			args := argv(p.agent)
			if v, _ := flagValue(args, "datastore"); v != "kubernetes" {
				t.Errorf("agent --datastore=%q, want kubernetes", v)
			}
			if v, _ := flagValue(args, "ipam"); v != "blocks" {
				t.Errorf("agent --ipam=%q, want blocks", v)
			}
			for _, f := range []string{"store", "cluster-cidr", "etcd-cert", "etcd-key", "etcd-ca", "kubeconfig"} {
				if _, ok := flagValue(args, f); ok {
					t.Errorf("agent --%s: the API is the store and the in-cluster config the agent's only credential", f)
				}
			}
		}},
		podCheck{"RBAC exactly what the code sends", blocksRBACCheck},
		podCheck{"releases on the host's path", func(t *testing.T, p *pod) {
			dir := ipamcni.DefaultReleaseDir
			if v, ok := flagValue(argv(p.agent), "release-dir"); ok {
				dir = v
			}
			// The plugins write the DELs' releases on the host; the agent
			// makes them from its container.
			vm, vol := p.volumeAt(p.agent, dir)
			switch {
			case dir != ipamcni.DefaultReleaseDir:
				t.Errorf("agent --release-dir=%s: the plugins write %s", dir, ipamcni.DefaultReleaseDir)
			case vol == nil || vol.HostPath == nil:
				t.Errorf("%s: not on a hostPath volume", dir)
			case vm.MountPath != path.Clean(vol.HostPath.Path) || vm.ReadOnly:
				t.Errorf("%s: mounted at %s from the host's %s (read-only %t); the plugins and the agent must see one path, writable", dir, vm.MountPath, vol.HostPath.Path, vm.ReadOnly)
			}
		}},
	))
}

// blocksRBACCheck: the agent's account is bound to blocksAgentRules and
// may ask for tokens of the plugins' account alone; the plugins' account
// (named by --cni-service-account, its own, mounted by no pod) is bound
// to blocksCNIRules; nothing else is granted.
func blocksRBACCheck(t *testing.T, p *pod) {
	if p.spec.AutomountServiceAccountToken == nil || !*p.spec.AutomountServiceAccountToken {
		t.Error("automountServiceAccountToken is not true on the pod: the agent needs its token")
	}
	agentSA := p.spec.ServiceAccountName
	v, _ := flagValue(argv(p.agent), "cni-service-account")
	ns, cniSA, _ := strings.Cut(v, "/")
	if ns != namespace || cniSA == "" || cniSA == agentSA {
		t.Fatalf("agent --cni-service-account=%q: want %s/NAME, an account other than the agent's %q", v, namespace, agentSA)
	}
	for _, name := range []string{agentSA, cniSA} {
		sa := p.m.serviceAccounts[name]
		if sa == nil {
			t.Fatalf("service account %q: not among the manifests", name)
		}
		if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
			t.Errorf("service account %s: automountServiceAccountToken is not false", name)
		}
	}
	want := map[string][]rbacv1.PolicyRule{agentSA: blocksAgentRules, cniSA: blocksCNIRules}
	if len(p.m.roleBindings) != len(want) || len(p.m.clusterRoles) != len(want) {
		t.Errorf("%d ClusterRoles, %d ClusterRoleBindings; want one each for %s and %s", len(p.m.clusterRoles), len(p.m.roleBindings), agentSA, cniSA)
	}
	for _, b := range p.m.roleBindings {
		if len(b.Subjects) != 1 || b.Subjects[0].Kind != rbacv1.ServiceAccountKind || b.Subjects[0].Namespace != namespace || want[b.Subjects[0].Name] == nil {
			t.Errorf("ClusterRoleBinding %s binds %+v, want one of %s/%s and %s/%s", b.Name, b.Subjects, namespace, agentSA, namespace, cniSA)
			continue
		}
		role := p.m.clusterRoles[b.RoleRef.Name]
		if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.APIGroup != rbacv1.GroupName || role == nil {
			t.Fatalf("ClusterRoleBinding %s: roleRef %+v is not a ClusterRole of the manifests", b.Name, b.RoleRef)
		}
		if w := want[b.Subjects[0].Name]; !reflect.DeepEqual(role.Rules, w) || role.AggregationRule != nil {
			t.Errorf("ClusterRole %s (bound to %s): rules %+v, want %+v", role.Name, b.Subjects[0].Name, role.Rules, w)
		}
	}
	tokenRule := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, ResourceNames: []string{cniSA}, Verbs: []string{"create"}}}
	if len(p.m.nsRoleBindings) != 1 || len(p.m.roles) != 1 {
		t.Fatalf("%d Roles, %d RoleBindings; want one each: the agent's TokenRequest for %s", len(p.m.roles), len(p.m.nsRoleBindings), cniSA)
	}
	for _, b := range p.m.nsRoleBindings {
		sa := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: agentSA, Namespace: namespace}
		role := p.m.roles[b.RoleRef.Name]
		switch {
		case !reflect.DeepEqual(b.Subjects, []rbacv1.Subject{sa}):
			t.Errorf("RoleBinding %s binds %+v, want the agent's account alone", b.Name, b.Subjects)
		case b.RoleRef.Kind != "Role" || b.RoleRef.APIGroup != rbacv1.GroupName || role == nil:
			t.Errorf("RoleBinding %s: roleRef %+v is not a Role of the manifests", b.Name, b.RoleRef)
		case !reflect.DeepEqual(role.Rules, tokenRule):
			t.Errorf("Role %s: rules %+v, want %+v", role.Name, role.Rules, tokenRule)
		}
	}
}

// TestBlocksNetworkConfig checks the blocks variant's conflist with
// podnet's own code: it is what `podnet install` would write for the
// same settings; its store is the kubeconfig the agent writes into the
// host's CNI config directory; it names no node; its pools are what the
// agent seeds and never masqueraded between; and as the agent installs
// it, it is a config podnet-ipam accepts.
func TestBlocksNetworkConfig(t *testing.T) {
	c := conflistOf(t, blocksDir)
	list, err := cni.ParseNetworkConfigList(c.shipped, "ConfigMap key "+c.key)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Plugins []json.RawMessage `json:"plugins"`
	}
	var main mainPlugin
	var masq struct {
		MasqExclude []string `json:"masqExclude"`
	}
	if err := json.Unmarshal(c.shipped, &doc); err != nil || len(doc.Plugins) == 0 {
		t.Fatalf("plugins: %v", err)
	}
	if err := json.Unmarshal(doc.Plugins[0], &main); err != nil {
		t.Fatalf("plugins[0]: %v", err)
	}
	_ = json.Unmarshal(doc.Plugins[0], &masq)
	if main.IPAM.Node != nil {
		t.Errorf("ipam.node %q: would give every node the same name", *main.IPAM.Node)
	}
	if want := "kubernetes:" + blocksKubeconfig; main.IPAM.Store != want {
		t.Errorf("ipam.store %q, want %q: the kubeconfig the agent writes for the plugins", main.IPAM.Store, want)
	}
	var pools []string
	for _, p := range main.IPAM.Pools {
		pools = append(pools, p.CIDR)
	}
	if len(pools) == 0 {
		t.Fatal("ipam.pools: none")
	}
	if !slices.Equal(masq.MasqExclude, pools) {
		t.Errorf("masqExclude %v, want the pools %v: traffic between pods is never masqueraded", masq.MasqExclude, pools)
	}
	blocksSeeds(t, c, pools)
	if _, req := c.installed(t); req.Config.Store != main.IPAM.Store || len(req.Pools) != len(pools) {
		t.Errorf("installed ipam: store %q, pools %+v; the ConfigMap's: %q, %v", req.Config.Store, req.Pools, main.IPAM.Store, pools)
	}
	want, err := install.ConfList(install.Network{Name: list.Name, Mode: main.Mode, Pools: pools, Store: main.IPAM.Store, MTU: main.MTU, IPMasq: main.IPMasq})
	if err != nil {
		t.Fatalf("podnet install refuses these settings: %v", err)
	}
	var got, wantDoc any
	if err := json.Unmarshal(c.shipped, &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &wantDoc); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, wantDoc) {
		t.Errorf("the ConfigMap's conflist is not what podnet install writes for its settings:\n--- ConfigMap\n%s\n--- podnet install\n%s", c.shipped, want)
	}
}

// blocksSeeds: the pools the agent creates from the conflist (at start,
// before it installs it) are the conflist's.
func blocksSeeds(t *testing.T, c *conflistCase, pools []string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), c.key)
	if err := os.WriteFile(file, c.shipped, 0o644); err != nil {
		t.Fatal(err)
	}
	seeds, err := agent.ConflistPools(file)
	if err != nil {
		t.Fatalf("the agent seeds no pools from the ConfigMap's conflist: %v", err)
	}
	var got []string
	for _, p := range seeds {
		got = append(got, p.CIDR.String())
	}
	if !slices.Equal(got, pools) {
		t.Errorf("the agent seeds pools %v, the conflist has %v", got, pools)
	}
}
