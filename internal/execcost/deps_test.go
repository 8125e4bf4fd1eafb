package execcost

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/podnet/podnet/internal/testutil"
)

// heavyClients are API clients whose package initialisation every
// plugin exec would pay: the full etcd client (plugins use
// ipam/store/etcdgw) and anything of Kubernetes' (only the agent talks
// to the API server; in the node-CIDR model the plugin reads a bbolt
// file).
// net/http too: the stores a plugin links (etcdgw, kube) speak
// HTTP/1.1 through internal/minihttp, because net/http's initialisation
// and pages cost every exec about a quarter of a millisecond.
var heavyClients = []string{"go.etcd.io/etcd/client/v3", "k8s.io/", "google.golang.org/grpc", "net/http"}

// pluginLinked are the packages plugins link: the plugins, and the
// stores for plugin-side IPAM (also listed on their own, so the test
// names the store at fault).
var pluginLinked = []string{"./plugins/...", "./ipam/store/etcdgw", "./ipam/store/kube", "./ipam/store/agentsock"}

// TestPluginsLinkNoAPIClients keeps the plugins light: none of them
// links an API client, whatever the agent and the CLI link.
func TestPluginsLinkNoAPIClients(t *testing.T) {
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range pluginLinked {
		cmd := exec.Command("go", "list", "-deps", target)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", target, err)
		}
		for _, pkg := range strings.Fields(string(out)) {
			for _, h := range heavyClients {
				if pkg == h || strings.HasPrefix(pkg, strings.TrimSuffix(h, "/")+"/") {
					t.Errorf("%s links %s", target, pkg)
				}
			}
		}
	}
}
