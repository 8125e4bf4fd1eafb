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
var heavyClients = []string{"go.etcd.io/etcd/client/v3", "k8s.io/", "google.golang.org/grpc"}

// TestPluginsLinkNoAPIClients keeps the plugins light: none of them
// links an API client, whatever the agent and the CLI link.
func TestPluginsLinkNoAPIClients(t *testing.T) {
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-deps", "./plugins/...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./plugins/...: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, h := range heavyClients {
			if strings.HasPrefix(pkg, h) {
				t.Errorf("a plugin links %s", pkg)
			}
		}
	}
}
