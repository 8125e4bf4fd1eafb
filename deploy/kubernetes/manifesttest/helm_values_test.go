package manifesttest

import (
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// renderedPod renders the chart with vals and finds its DaemonSet's pod
// among the rendered objects (CRDs left out: the variants' checks do not
// know them).
func renderedPod(t *testing.T, vals map[string]any) *pod {
	t.Helper()
	out, err := render(loadChart(t), vals)
	if err != nil {
		t.Fatalf("helm: %v", err)
	}
	m, dec := newManifests(), decoder()
	for _, name := range slices.Sorted(maps.Keys(out)) {
		if strings.HasSuffix(name, "crd.yaml") || strings.HasSuffix(name, "crds.yaml") {
			continue
		}
		if errs := m.addFile(dec, name, []byte(out[name])); len(errs) > 0 {
			t.Fatalf("the chart's output: %v", errs)
		}
	}
	return podOf(t, m)
}

// valueCases: values away from the ci files, each rendered, put through
// what every podnet DaemonSet must be (podChecks) and the agent's and
// podnet-ipam's own reading of the conflist, then checked for what the
// value is for.
var valueCases = []struct {
	name  string
	vals  map[string]any
	check func(t *testing.T, p *pod, c *conflistCase)
}{
	{"denyLog", map[string]any{"denyLog": true, "routingMode": "host-gw"}, func(t *testing.T, p *pod, _ *conflistCase) {
		args := argv(p.agent)
		if !slices.Contains(args, "--policy-deny-log") || !slices.Contains(args, "--network-policy") {
			t.Errorf("agent args %q: want --network-policy and --policy-deny-log", args)
		}
		if v, _ := p.expandedFlag(t, p.agent, "mode"); v != "host-gw" {
			t.Errorf("agent --mode=%s, want host-gw", v)
		}
	}},
	{"networkPolicy false", map[string]any{"networkPolicy": false}, func(t *testing.T, p *pod, _ *conflistCase) {
		if args := argv(p.agent); slices.Contains(args, "--network-policy") {
			t.Errorf("agent args %q: --network-policy", args)
		}
		want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: nodeVerbs}}
		if r := p.m.clusterRoles["podnet"]; r == nil || !reflect.DeepEqual(r.Rules, want) {
			t.Errorf("ClusterRole podnet: %+v, want the nodes' rule alone (no policy service, no reads of its objects)", r)
		}
	}},
	{"dual-stack node CIDR, mtu", map[string]any{"pools": []any{"10.244.0.0/16", "fd00:10:244::/56"}, "mtu": 1400}, func(t *testing.T, p *pod, c *conflistCase) {
		cidrs, err := clusterCIDRs(t, p)
		if err != nil || len(cidrs) != 2 || cidrs[1] != netip.MustParsePrefix("fd00:10:244::/56") {
			t.Errorf("agent --cluster-cidr: %v, %v; want both families", cidrs, err)
		}
		if main, _ := c.installed(t); main["mtu"] != 1400.0 {
			t.Errorf("installed mtu %v, want 1400", main["mtu"])
		}
	}},
	{"blocks, three pools", map[string]any{"datastore": "blocks", "pools": []any{"10.244.0.0/16", "fd00:10:244::/56", "10.96.64.0/18"}}, func(t *testing.T, p *pod, c *conflistCase) {
		_, req := c.installed(t)
		var got []string
		for _, pl := range req.Pools {
			got = append(got, pl.Name+"="+pl.CIDR.String())
		}
		if want := []string{"default=10.244.0.0/16", "default6=fd00:10:244::/56", "default-2=10.96.64.0/18"}; !slices.Equal(got, want) {
			t.Errorf("installed pools %v, want %v", got, want)
		}
	}},
	{"etcd with TLS", map[string]any{"datastore": "etcd", "networkPolicy": false, "etcd": map[string]any{"endpoints": []any{"etcd-0.example:2379", "etcd-1.example:2379"}, "tls": true}}, func(t *testing.T, p *pod, c *conflistCase) {
		if v, _ := p.expandedFlag(t, p.agent, "store"); v != "etcd://etcd-0.example:2379,etcd-1.example:2379" {
			t.Errorf("agent --store=%s", v)
		}
		if _, req := c.installed(t); req.Config.Store != "etcd://etcd-0.example:2379,etcd-1.example:2379" {
			t.Errorf("plugins' store %q: not the agent's", req.Config.Store)
		}
		for _, f := range []string{"etcd-cert", "etcd-key", "etcd-ca"} {
			file, _ := p.expandedFlag(t, p.agent, f)
			if _, vol := p.volumeAt(p.agent, file); file == "" || vol == nil || vol.Secret == nil || vol.Secret.SecretName != "podnet-etcd-tls" {
				t.Errorf("agent --%s=%q: not a file of the Secret podnet-etcd-tls", f, file)
			}
		}
	}},
	{"image digest", map[string]any{"image": map[string]any{"repository": "registry.example/podnet", "tag": "v0.1.0", "digest": "sha256:" + strings.Repeat("ab", 32), "pullPolicy": "IfNotPresent"}}, func(t *testing.T, p *pod, _ *conflistCase) {
		want := "registry.example/podnet:v0.1.0@sha256:" + strings.Repeat("ab", 32)
		for _, c := range []string{p.init.Image, p.agent.Image, string(p.init.ImagePullPolicy), string(p.agent.ImagePullPolicy)} {
			if c != want && c != "IfNotPresent" {
				t.Errorf("image %q or pull policy, want %s, IfNotPresent", c, want)
			}
		}
	}},
}

// TestChartValues: what each value does, rendered by Helm and read back
// by the checks of the shipped variants and by podnet's own code.
func TestChartValues(t *testing.T) {
	for _, vc := range valueCases {
		t.Run(vc.name, func(t *testing.T) {
			p := renderedPod(t, vc.vals)
			runChecks(t, p, podChecks())
			c := conflistFor(t, p)
			c.installed(t)
			vc.check(t, p, c)
		})
	}
}

// TestChartConfigHash: a change of the ConfigMap alone changes the pod
// template, so that `helm upgrade` rolls the agents.
func TestChartConfigHash(t *testing.T) {
	hash := func(vals map[string]any) string {
		return renderedPod(t, vals).ds.Spec.Template.Annotations["podnet.io/config-hash"]
	}
	base := hash(nil)
	for _, vals := range []map[string]any{{"routingMode": "vxlan"}, {"encryption": map[string]any{"type": "wireguard"}}, {"mtu": 1400}, {"pools": []any{"10.96.0.0/12"}}} {
		if h := hash(vals); h == base || h == "" {
			t.Errorf("%v: config hash %q, the defaults' %q", vals, h, base)
		}
	}
	if h := hash(map[string]any{"denyLog": true}); h != base {
		t.Errorf("denyLog (an argument, not in the ConfigMap) changed the config hash: %s", fmt.Sprint(h))
	}
}
