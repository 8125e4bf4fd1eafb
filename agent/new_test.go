package agent

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/podnet/podnet/agent/cniinstall"
	"github.com/podnet/podnet/ipam"
)

// TestNewKube: the Kubernetes datastore needs no store but an API server
// config, and the node-CIDR install goes with it alone.
func TestNewKube(t *testing.T) {
	ic := &cniinstall.Config{ConfDir: t.TempDir(), NodeCIDR: &cniinstall.NodeCIDR{Store: "bolt:/x.db", ClusterCIDRs: []netip.Prefix{pfx("10.244.0.0/16")}}}
	for _, tt := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"kube", Config{Node: "n", Kube: &KubeConfig{REST: &rest.Config{Host: "https://192.0.2.1"}}, Install: ic}, true},
		{"kube without API server", Config{Node: "n", Kube: &KubeConfig{}}, false},
		{"node-CIDR install on the store", Config{Node: "n", Store: nopStore{}, Install: ic}, false},
		{"neither", Config{Node: "n"}, false},
		{"network policy", Config{Node: "n", Kube: &KubeConfig{REST: &rest.Config{Host: "https://192.0.2.1"}}, NetworkPolicy: true}, true},
		{"wireguard", Config{Node: "n", Kube: &KubeConfig{REST: &rest.Config{Host: "https://192.0.2.1"}}, Encryption: EncryptionWireGuard, WireGuardPort: 51871}, true},
		{"unknown encryption", Config{Node: "n", Store: nopStore{}, Encryption: "ipsec"}, false},
		{"wireguard port out of range", Config{Node: "n", Store: nopStore{}, Encryption: EncryptionWireGuard, WireGuardPort: 70000}, false},
	} {
		if _, err := New(tt.cfg); (err == nil) != tt.ok {
			t.Errorf("%s: New: %v", tt.name, err)
		}
	}
}

// nopStore is an ipam.Store for tests that never reach the store.
type nopStore struct{ ipam.Store }

// nopWatchStore is a nopStore that can be the datastore, for tests of
// what New checks besides the store.
type nopWatchStore struct {
	nopStore
	ipam.Watcher
}

// TestNewChecksInstall: a bad network config fails the agent's start,
// before the underlay is known, not the install much later.
func TestNewChecksInstall(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.conflist")
	big := filepath.Join(dir, "big.conflist")
	if err := os.WriteFile(big, []byte(`{"cniVersion":"1.0.0","name":"podnet","plugins":[{"type":"podnet","mtu":"big"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{missing: missing, big: `plugins[0].mtu "big"`} {
		bad := &cniinstall.Config{ConfDir: dir, NetworkConfig: file}
		if _, err := New(Config{Node: "n", Store: nopWatchStore{}, Install: bad}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New with %s: %v, want an error naming %s", file, err, want)
		}
	}
}

// TestNewNetworkPolicyNeedsKube: NetworkPolicy is read from the API, so
// the store datastore refuses it, saying so.
func TestNewNetworkPolicyNeedsKube(t *testing.T) {
	_, err := New(Config{Node: "n", Store: nopWatchStore{}, NetworkPolicy: true})
	if err == nil || !strings.Contains(err.Error(), "network policy needs the Kubernetes datastore") {
		t.Errorf("New with network policy on the store datastore: %v", err)
	}
	a, err := New(Config{Node: "n", Kube: &KubeConfig{REST: &rest.Config{Host: "https://192.0.2.1"}}, NetworkPolicy: true})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range a.plan(make(chan struct{})) {
		names = append(names, s.name)
	}
	if !slices.Contains(names, "network-policy") {
		t.Errorf("services %v, want network-policy among them", names)
	}
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
