package manifesttest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/install"
)

// TestEtcdDaemonSet checks the etcd variant's DaemonSet: what every
// podnet DaemonSet must be (podChecks), and an agent that reaches etcd
// and no API.
func TestEtcdDaemonSet(t *testing.T) {
	p := loadPodFrom(t, etcdDir)
	runChecks(t, p, append(podChecks(),
		podCheck{"service account without API access", func(t *testing.T, p *pod) {
			sa := p.m.serviceAccounts[p.spec.ServiceAccountName]
			if sa == nil {
				t.Fatalf("serviceAccountName %q: not among the manifests", p.spec.ServiceAccountName)
			}
			if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken ||
				p.spec.AutomountServiceAccountToken == nil || *p.spec.AutomountServiceAccountToken {
				t.Error("automountServiceAccountToken must be false on the account and the pod: the agent does not use the API")
			}
			if len(p.m.clusterRoles) > 0 || len(p.m.roleBindings) > 0 {
				t.Errorf("%d ClusterRoles, %d ClusterRoleBindings: the agent does not use the API", len(p.m.clusterRoles), len(p.m.roleBindings))
			}
		}},
		podCheck{"agent reaches etcd", func(t *testing.T, p *pod) {
			if v, ok := flagValue(argv(p.agent), "datastore"); ok && v != "etcd" {
				t.Errorf("agent --datastore=%q: the etcd variant keeps its registrations in the store", v)
			}
			store, _ := p.expandedFlag(t, p.agent, "store")
			if !strings.HasPrefix(store, "etcd://") || len(store) == len("etcd://") {
				t.Errorf("agent --store=%q: want etcd://HOST:PORT[,HOST:PORT]", store)
			}
		}},
		podCheck{"etcd TLS files from the secret", etcdTLSCheck},
	))
}

func etcdTLSCheck(t *testing.T, p *pod) {
	set := 0
	for _, f := range []string{"etcd-cert", "etcd-key", "etcd-ca"} {
		v, _ := p.expandedFlag(t, p.agent, f)
		if v == "" {
			continue
		}
		set++
		if _, vol := p.volumeAt(p.agent, v); vol == nil || vol.Secret == nil {
			t.Errorf("agent --%s=%s: not on a Secret volume", f, v)
		}
	}
	cert, _ := p.expandedFlag(t, p.agent, "etcd-cert")
	key, _ := p.expandedFlag(t, p.agent, "etcd-key")
	if (cert == "") != (key == "") {
		t.Errorf("agent --etcd-cert=%q --etcd-key=%q: set both or neither", cert, key)
	}
	for _, v := range p.spec.Volumes {
		if v.Secret != nil && p.m.secrets[v.Secret.SecretName] == nil && (v.Secret.Optional == nil || !*v.Secret.Optional) {
			t.Errorf("volume %s: Secret %q is not shipped, so it must be optional", v.Name, v.Secret.SecretName)
		}
	}
}

// mainPlugin is the fields of the conflist's first plugin that
// install.Network describes.
type mainPlugin struct {
	Type   string `json:"type"`
	Mode   string `json:"mode"`
	MTU    int    `json:"mtu"`
	IPMasq *bool  `json:"ipMasq"`
	IPAM   struct {
		Type  string  `json:"type"`
		Store string  `json:"store"`
		Node  *string `json:"node"`
		Pools []struct {
			CIDR string `json:"cidr"`
		} `json:"pools"`
	} `json:"ipam"`
}

// TestEtcdNetworkConfig checks the etcd variant's conflist with podnet's
// own code: it is what `podnet install` would write for the same
// settings, so it stays in step with the plugins' config format; it
// names the agent's store and no node; and as the agent installs it, it
// is a config podnet-ipam accepts.
func TestEtcdNetworkConfig(t *testing.T) {
	c := conflistOf(t, etcdDir)
	list, err := cni.ParseNetworkConfigList(c.shipped, "ConfigMap key "+c.key)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Plugins []json.RawMessage `json:"plugins"`
	}
	var main mainPlugin
	if err := json.Unmarshal(c.shipped, &doc); err != nil || len(doc.Plugins) == 0 {
		t.Fatalf("plugins: %v", err)
	}
	if err := json.Unmarshal(doc.Plugins[0], &main); err != nil {
		t.Fatalf("plugins[0]: %v", err)
	}
	// One conflist serves every node; the agent adds its own node name.
	if main.IPAM.Node != nil {
		t.Errorf("ipam.node %q: would give every node the same name", *main.IPAM.Node)
	}
	// A bolt store would be one IPAM per node: overlapping pod addresses.
	if store, _ := c.p.expandedFlag(t, c.p.agent, "store"); main.IPAM.Store != store {
		t.Errorf("ipam.store %q, agent --store %q: the plugins and the agent must share one store", main.IPAM.Store, store)
	}
	if len(main.IPAM.Pools) == 0 {
		t.Fatalf("ipam.pools: none")
	}
	var pools []string
	for _, p := range main.IPAM.Pools {
		pools = append(pools, p.CIDR)
	}
	if _, req := c.installed(t); req.Config.Store != main.IPAM.Store || len(req.Pools) != len(pools) {
		t.Errorf("installed ipam: store %q, pools %+v; the ConfigMap's: %q, %v", req.Config.Store, req.Pools, main.IPAM.Store, pools)
	}

	c.isInstallWrite(t, install.Network{Name: list.Name, Mode: main.Mode, Pools: pools, Store: main.IPAM.Store, MTU: main.MTU, IPMasq: main.IPMasq})
}
