package manifesttest

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/podnet/podnet/agent/cniinstall"
	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/install"
	"github.com/podnet/podnet/ipamcni"
)

// rootDir is podnet's main module, relative to this package.
const rootDir = "../../.."

// renderNode is the node name the tests render conflists for.
const renderNode = "node-1"

// conflistCase is a variant's network config: the ConfigMap's, and what
// the agent installs on a node called renderNode.
type conflistCase struct {
	p        *pod
	key      string
	shipped  []byte
	rendered []byte
	// podCIDRs are the node's, on the Kubernetes datastore: the first /24
	// of the cluster CIDR.
	podCIDRs []netip.Prefix
}

// conflistOf renders the ConfigMap's conflist of the variant in dir with
// the agent's own code, from the agent's flags as the ConfigMap sets them.
func conflistOf(t *testing.T, dir string) *conflistCase {
	t.Helper()
	return conflistFor(t, loadPodFrom(t, dir))
}

// conflistFor is conflistOf for the pod p.
func conflistFor(t *testing.T, p *pod) *conflistCase {
	t.Helper()
	c := &conflistCase{p: p}
	cm, key, err := c.p.networkConfig()
	if err != nil {
		t.Fatal(err)
	}
	c.key, c.shipped = key, []byte(cm.Data[key])
	if want := install.ConfFileName(networkName(t, c.shipped)); key != want {
		t.Errorf("key %q: the agent installs it as %s, so name the key that", key, want)
	}
	file := filepath.Join(t.TempDir(), key)
	if err := os.WriteFile(file, c.shipped, 0o644); err != nil {
		t.Fatal(err)
	}
	ic := cniinstall.Config{NetworkConfig: file}
	// Block IPAM on the API installs the conflist as it is, with the
	// node's name; node CIDR makes the node's podCIDRs its pools.
	blocks := false
	if v, _ := flagValue(argv(c.p.agent), "ipam"); v == "blocks" {
		blocks = true
	}
	if v, _ := flagValue(argv(c.p.agent), "datastore"); v == "kubernetes" && !blocks {
		cidrs, err := clusterCIDRs(t, c.p)
		if err != nil {
			t.Fatal(err)
		}
		store, _ := c.p.expandedFlag(t, c.p.agent, "store")
		ic.NodeCIDR = &cniinstall.NodeCIDR{Store: store, ClusterCIDRs: cidrs}
		c.podCIDRs = []netip.Prefix{netip.PrefixFrom(cidrs[0].Addr(), 24)}
	}
	if c.rendered, err = ic.Render(renderNode, c.podCIDRs); err != nil {
		t.Fatalf("the agent refuses the ConfigMap's conflist: %v", err)
	}
	return c
}

func networkName(t *testing.T, conflist []byte) string {
	t.Helper()
	var doc struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(conflist, &doc); err != nil {
		t.Fatalf("conflist: %v", err)
	}
	return doc.Name
}

// installed checks the conflist the agent installs as a runtime and
// podnet-ipam read it: it parses, names only plugins podnet install
// provides, and its first plugin is podnet with podnet-ipam, whose config
// (with the network's name and version, as the runtime adds them)
// podnet-ipam accepts for the node. It returns that plugin's fields and
// podnet-ipam's request.
func (c *conflistCase) installed(t *testing.T) (map[string]any, *ipamcni.Request) {
	t.Helper()
	list, err := cni.ParseNetworkConfigList(c.rendered, "installed "+c.key)
	if err != nil {
		t.Fatal(err)
	}
	for i, pc := range list.Plugins {
		for _, typ := range []string{pc.Type, pc.IPAMType} {
			if typ != "" && !slices.Contains(install.PluginNames, typ) {
				t.Errorf("plugins[%d]: type %q is not one podnet installs %v", i, typ, install.PluginNames)
			}
		}
	}
	var doc struct {
		Plugins []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(c.rendered, &doc); err != nil || len(doc.Plugins) == 0 {
		t.Fatalf("installed plugins: %v", err)
	}
	main := doc.Plugins[0]
	ipam, _ := main["ipam"].(map[string]any)
	if main["type"] != "podnet" || ipam["type"] != "podnet-ipam" {
		t.Fatalf("plugins[0]: type %v with ipam %v, want podnet with podnet-ipam", main["type"], ipam["type"])
	}
	stdin, _ := json.Marshal(mergeMaps(main, map[string]any{"name": list.Name, "cniVersion": list.CNIVersion}))
	req, err := ipamcni.ParseRequest(stdin, nil)
	if err != nil {
		t.Fatalf("podnet-ipam refuses the installed config: %v", err)
	}
	if req.Config.Node != renderNode {
		t.Errorf("installed ipam.node %q, want the agent's node %q", req.Config.Node, renderNode)
	}
	return main, req
}

func mergeMaps(a, b map[string]any) map[string]any {
	out := map[string]any{}
	for _, m := range []map[string]any{a, b} {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// TestNetValidate runs `podnet net validate` on every variant's conflist
// as its agent installs it, with podnet and its plugins built from the
// main module: every plugin the config names exists, runs, and supports
// its cniVersion.
func TestNetValidate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds podnet and its plugins")
	}
	var missing []string
	for _, name := range install.PluginNames {
		if _, err := os.Stat(filepath.Join(rootDir, "plugins", name)); err != nil {
			missing = append(missing, "plugins/"+name)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("the config names plugins the main module does not have: %s", strings.Join(missing, ", "))
	}

	tmp := t.TempDir()
	cliDir, binDir := filepath.Join(tmp, "cli"), filepath.Join(tmp, "bin")
	// The CLI and the main plugin are both called podnet: two directories.
	goBuild(t, cliDir, "./cmd/podnet")
	pkgs := make([]string, len(install.PluginNames))
	for i, name := range install.PluginNames {
		pkgs[i] = "./plugins/" + name
	}
	goBuild(t, binDir, pkgs...)
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			c := conflistOf(t, v.dir)
			netValidate(t, filepath.Join(cliDir, "podnet"), binDir, filepath.Join(tmp, v.name), c.key, c.rendered)
		})
	}
}

// netValidate writes the conflist data as key into a conf dir of its own
// under dir and runs podnet net validate on it.
func netValidate(t *testing.T, podnet, binDir, dir, key string, data []byte) {
	confDir := filepath.Join(dir, "net.d")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(confDir, key), data, 0o644); err != nil {
		t.Fatal(err)
	}
	list, err := cni.ParseNetworkConfigList(data, key)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(podnet, "--conf-dir", confDir, "--bin-dir", binDir,
		"--cache-dir", filepath.Join(dir, "cache"), "--state-dir", filepath.Join(dir, "state"),
		"net", "validate", list.Name)
	out, err := cmd.CombinedOutput()
	t.Logf("%s\n%s", cmd, out)
	if err != nil {
		t.Fatalf("podnet net validate: %v", err)
	}
	if !bytes.Contains(out, []byte("ok   network "+`"`+list.Name+`"`)) {
		t.Errorf("podnet net validate did not report network %q ok", list.Name)
	}
	// Every runtime in use runs it: containerd 1.6's libcni, which reads
	// nothing newer than 1.0.0, as much as those that pick 1.1.0.
	if bytes.Contains(out, []byte("not run by")) {
		t.Errorf("a runtime in use cannot run the ConfigMap's conflist")
	}
	for _, r := range cni.KnownReaders {
		if !bytes.Contains(out, []byte("run by "+r.Name+" at ")) {
			t.Errorf("podnet net validate does not say whether %s runs it", r.Name)
		}
	}
}

// goBuild builds packages of the main module into dir, as the
// Containerfile does.
func goBuild(t *testing.T, dir string, pkgs ...string) {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go tool: %v", err)
	}
	args := append([]string{"build", "-trimpath", "-buildvcs=false", "-o", dir + "/"}, pkgs...)
	cmd := exec.Command(goTool, args...)
	cmd.Dir = rootDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s (in %s): %v\n%s", strings.Join(args, " "), rootDir, err, out)
	}
}

// isInstallWrite checks that the shipped conflist is what `podnet install`
// writes for the same settings.
func (c *conflistCase) isInstallWrite(t *testing.T, n install.Network) {
	t.Helper()
	want, err := install.ConfList(n)
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
