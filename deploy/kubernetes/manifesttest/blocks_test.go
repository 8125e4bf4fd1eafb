package manifesttest

import (
	"encoding/json"
	"maps"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/podnet/podnet/agent/cniinstall"
	"github.com/podnet/podnet/agent/kubeblocks"
	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/install"
	"github.com/podnet/podnet/ipamcni"
)

// blocksAgentRules are the rights of block IPAM on the API, each verb
// one the code sends (docs/design/kubernetes-ipam.md 5.1 is the plan;
// blocks/rbac.yaml says where this differs and why): the agent's alone,
// since the plugins allocate through its socket. Nodes as in the
// default; the pools it seeds from the conflist (ipam.Allocator.Pools
// lists, PutPool of a missing pool creates) and lists for the plugins;
// the IPAMNode informer (list, watch); the plugins' ADD and DEL through
// the socket (the node's index and blocks read by name, a claim probes
// blocks by name, lists them when the probes find none free, as
// borrowing does, creates its block and creates or updates the index;
// an allocation or release updates a block); its GC (Repair, CheckNode,
// ReleaseByHandle; a block whose release was under way deleted); and
// RemoveNode of a Node deleted for DeletedNodeGrace (its blocks updated
// or deleted, its index deleted). The policy service's, as in the
// default (policyRules).
var blocksAgentRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list", "watch", "patch"}},
	eventsRule, policyRules[0], policyRules[1], policyRules[2], policyRules[3],
	{APIGroups: []string{"podnet.io"}, Resources: []string{"ippools"}, Verbs: []string{"list", "create"}},
	{APIGroups: []string{"podnet.io"}, Resources: []string{"ipamnodes"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
	{APIGroups: []string{"podnet.io"}, Resources: []string{"ipamblocks"}, Verbs: []string{"get", "list", "create", "update", "delete"}},
}

// TestBlocksDaemonSet checks the blocks variant's DaemonSet: what every
// podnet DaemonSet must be, an agent on block IPAM on the API with only
// the rights it uses, the plugins' socket where they find it, and the
// DELs' releases where the agent finds them.
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
		podCheck{"agent enforces NetworkPolicy", networkPolicyCheck},
		podCheck{"the plugins' socket on the host's path", func(t *testing.T, p *pod) {
			sock := kubeblocks.DefaultSocket
			if v, ok := flagValue(argv(p.agent), "ipam-socket"); ok {
				sock = v
			}
			vm, vol := p.volumeAt(p.agent, path.Dir(sock))
			switch {
			case sock != blocksSocket:
				t.Errorf("agent --ipam-socket=%s: the conflist's plugins dial %s", sock, blocksSocket)
			case vol == nil || vol.HostPath == nil:
				t.Errorf("%s: not on a hostPath volume", path.Dir(sock))
			case vm.MountPath != path.Clean(vol.HostPath.Path) || vm.ReadOnly:
				t.Errorf("%s: mounted at %s from the host's %s (read-only %t); the plugins and the agent must see one path, writable", path.Dir(sock), vm.MountPath, vol.HostPath.Path, vm.ReadOnly)
			}
		}},
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

// blocksSocket is where the plugins of the blocks conflist dial the agent.
const blocksSocket = "/run/podnet/ipam.sock"

// blocksRBACCheck: the agent's account, mounted by no other pod, is bound
// to blocksAgentRules, and nothing else is granted.
func blocksRBACCheck(t *testing.T, p *pod) {
	if p.spec.AutomountServiceAccountToken == nil || !*p.spec.AutomountServiceAccountToken {
		t.Error("automountServiceAccountToken is not true on the pod: the agent needs its token")
	}
	agentSA := p.spec.ServiceAccountName
	if len(p.m.serviceAccounts) != 1 || p.m.serviceAccounts[agentSA] == nil {
		t.Fatalf("service accounts %v: want the agent's %q alone (the plugins use the agent's socket)", slices.Sorted(maps.Keys(p.m.serviceAccounts)), agentSA)
	}
	if sa := p.m.serviceAccounts[agentSA]; sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Errorf("service account %s: automountServiceAccountToken is not false", agentSA)
	}
	if len(p.m.roleBindings) != 1 || len(p.m.clusterRoles) != 1 || len(p.m.roles) != 0 || len(p.m.nsRoleBindings) != 0 {
		t.Errorf("%d ClusterRoles, %d ClusterRoleBindings, %d Roles, %d RoleBindings; want one ClusterRole and its binding for %s",
			len(p.m.clusterRoles), len(p.m.roleBindings), len(p.m.roles), len(p.m.nsRoleBindings), agentSA)
	}
	for _, b := range p.m.roleBindings {
		want := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: agentSA, Namespace: namespace}}
		if !reflect.DeepEqual(b.Subjects, want) {
			t.Errorf("ClusterRoleBinding %s binds %+v, want %s/%s alone", b.Name, b.Subjects, namespace, agentSA)
			continue
		}
		role := p.m.clusterRoles[b.RoleRef.Name]
		if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.APIGroup != rbacv1.GroupName || role == nil {
			t.Fatalf("ClusterRoleBinding %s: roleRef %+v is not a ClusterRole of the manifests", b.Name, b.RoleRef)
		}
		if !reflect.DeepEqual(role.Rules, blocksAgentRules) || role.AggregationRule != nil {
			t.Errorf("ClusterRole %s: rules %+v, want %+v", role.Name, role.Rules, blocksAgentRules)
		}
	}
}

// TestBlocksNetworkConfig checks the blocks variant's conflist with
// podnet's own code: it is what `podnet install` would write for the
// same settings; its store is the socket the agent serves on the host;
// it names no node; its pools are what the
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
	if want := "agent:" + blocksSocket; main.IPAM.Store != want {
		t.Errorf("ipam.store %q, want %q: the socket the agent serves the plugins' IPAM on", main.IPAM.Store, want)
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
	c.isInstallWrite(t, install.Network{Name: list.Name, Mode: main.Mode, Pools: pools, Store: main.IPAM.Store, MTU: main.MTU, IPMasq: main.IPMasq})
}

// blocksSeeds: the pools the agent creates from the conflist (at start,
// before it installs it) are the conflist's.
func blocksSeeds(t *testing.T, c *conflistCase, pools []string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), c.key)
	if err := os.WriteFile(file, c.shipped, 0o644); err != nil {
		t.Fatal(err)
	}
	seeds, err := cniinstall.ConflistPools(file)
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
