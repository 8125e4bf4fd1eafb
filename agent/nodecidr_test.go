package agent

import (
	"context"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podnet/podnet/install"
	"github.com/podnet/podnet/ipam"
)

// TestInstallNodeCIDRs: the node-CIDR install writes no config, and the
// agent is not ready, until the node's podCIDRs are known; then it writes
// the config for them, and writes it again when they change.
func TestInstallNodeCIDRs(t *testing.T) {
	dir := t.TempDir()
	ic := &InstallConfig{ConfDir: dir, Network: install.Network{Name: "podnet"},
		NodeCIDR: &NodeCIDRInstall{Store: "bolt:/var/lib/podnet/ipam.db", ClusterCIDRs: []netip.Prefix{pfx("10.244.0.0/16")}}}
	a := &Agent{cfg: Config{Node: "n1", Install: ic}, log: slog.New(slog.DiscardHandler),
		state: newClusterState(ipam.Keys{}, ipam.DefaultPrefix), kube: &kubeSource{ownChanged: make(chan struct{}, 1)},
		ready: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { a.installNodeCIDRs(ctx) })
	defer func() { cancel(); wg.Wait() }()
	path := filepath.Join(dir, "10-podnet.conflist")

	// Another node's podCIDRs are not this node's.
	a.setKubeNode("n2", "10.244.2.0/24")
	time.Sleep(200 * time.Millisecond)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("config written before the node had podCIDRs: %v", err)
	}
	select {
	case <-a.ReadyC():
		t.Fatal("ready before the node had podCIDRs")
	default:
	}

	a.setKubeNode("n1", "10.244.1.0/24")
	waitConf(t, path, `"cidr": "10.244.1.0/24"`)
	select {
	case <-a.ReadyC():
	case <-time.After(30 * time.Second):
		t.Fatal("config written, agent not ready")
	}
	// A Node deleted and registered again with another CIDR.
	a.setKubeNode("n1", "10.244.7.0/24")
	waitConf(t, path, `"cidr": "10.244.7.0/24"`)
}

// setKubeNode records node with podCIDR cidr as the informer would.
func (a *Agent) setKubeNode(node, cidr string) {
	a.mu.Lock()
	a.state.setNode(node, rec(node, "198.18.0.1"), true, []netip.Prefix{pfx(cidr)})
	a.mu.Unlock()
	if node == a.cfg.Node {
		signal(a.kube.ownChanged)
	}
}

func waitConf(t *testing.T, path, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("config %s: no %s after 30s:\n%s", path, want, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
