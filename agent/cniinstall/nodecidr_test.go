package cniinstall

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
)

// TestInstallNodeCIDRs: the node-CIDR install writes no config, and the
// agent is not ready, until the node's podCIDRs are known; then it writes
// the config for them, and writes it again when they change.
func TestInstallNodeCIDRs(t *testing.T) {
	dir := t.TempDir()
	ic := &Config{ConfDir: dir, Network: install.Network{Name: "podnet"},
		NodeCIDR: &NodeCIDR{Store: "bolt:/var/lib/podnet/ipam.db", ClusterCIDRs: []netip.Prefix{pfx("10.244.0.0/16")}}}
	n := &fakeNodes{changed: make(chan struct{}, 1), cidrs: map[string][]netip.Prefix{}}
	a := NewService(ic, ServiceConfig{Node: "n1", Logger: slog.New(slog.DiscardHandler),
		PodCIDRs: func() []netip.Prefix { return n.get("n1") }, PodCIDRsChanged: n.changed})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = a.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	path := filepath.Join(dir, "10-podnet.conflist")

	// Another node's podCIDRs are not this node's.
	n.set("n2", "10.244.2.0/24")
	time.Sleep(200 * time.Millisecond)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("config written before the node had podCIDRs: %v", err)
	}
	select {
	case <-a.ReadyC():
		t.Fatal("ready before the node had podCIDRs")
	default:
	}

	n.set("n1", "10.244.1.0/24")
	waitConf(t, path, `"cidr": "10.244.1.0/24"`)
	select {
	case <-a.ReadyC():
	case <-time.After(30 * time.Second):
		t.Fatal("config written, agent not ready")
	}
	// A Node deleted and registered again with another CIDR.
	n.set("n1", "10.244.7.0/24")
	waitConf(t, path, `"cidr": "10.244.7.0/24"`)
}

// fakeNodes are the podCIDRs of each node, as the Node informer would
// record them.
type fakeNodes struct {
	mu      sync.Mutex
	cidrs   map[string][]netip.Prefix
	changed chan struct{}
}

func (f *fakeNodes) set(node, cidr string) {
	f.mu.Lock()
	f.cidrs[node] = []netip.Prefix{pfx(cidr)}
	f.mu.Unlock()
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

func (f *fakeNodes) get(node string) []netip.Prefix {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cidrs[node]
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
