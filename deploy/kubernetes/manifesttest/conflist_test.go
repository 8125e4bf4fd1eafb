package manifesttest

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/install"
)

// rootDir is podnet's main module, relative to this package.
const rootDir = "../../.."

// conflist returns the network config the agent installs, and the
// ConfigMap key it comes from.
func conflist(t *testing.T) (p *pod, key string, data []byte) {
	t.Helper()
	p = loadPod(t)
	cm, key, err := p.networkConfig()
	if err != nil {
		t.Fatal(err)
	}
	return p, key, []byte(cm.Data[key])
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

// TestNetworkConfig checks the ConfigMap's conflist with podnet's own
// code: it parses as podnet's runtime parses it, names only plugins that
// `podnet install` provides, and is what `podnet install` would write for
// the same settings, so it stays in step with the plugins' config format.
func TestNetworkConfig(t *testing.T) {
	p, key, data := conflist(t)
	list, err := cni.ParseNetworkConfigList(data, "ConfigMap key "+key)
	if err != nil {
		t.Fatal(err)
	}
	if want := install.ConfFileName(list.Name); key != want {
		t.Errorf("key %q for network %q: the agent installs it as %s, so name the key that", key, list.Name, want)
	}
	for i, pc := range list.Plugins {
		for _, typ := range []string{pc.Type, pc.IPAMType} {
			if typ != "" && !slices.Contains(install.PluginNames, typ) {
				t.Errorf("plugins[%d]: type %q is not one podnet installs %v", i, typ, install.PluginNames)
			}
		}
	}

	var doc struct {
		Plugins []json.RawMessage `json:"plugins"`
	}
	var main mainPlugin
	if err := json.Unmarshal(data, &doc); err != nil || len(doc.Plugins) == 0 {
		t.Fatalf("plugins: %v", err)
	}
	if err := json.Unmarshal(doc.Plugins[0], &main); err != nil {
		t.Fatalf("plugins[0]: %v", err)
	}
	if main.Type != "podnet" || main.IPAM.Type != "podnet-ipam" {
		t.Fatalf("plugins[0]: type %q with ipam %q, want podnet with podnet-ipam", main.Type, main.IPAM.Type)
	}
	// One conflist serves every node; the agent adds its own node name.
	if main.IPAM.Node != nil {
		t.Errorf("ipam.node %q: would give every node the same name", *main.IPAM.Node)
	}
	// A bolt store would be one IPAM per node: overlapping pod addresses.
	if store, _ := p.expandedFlag(t, p.agent, "store"); main.IPAM.Store != store {
		t.Errorf("ipam.store %q, agent --store %q: the plugins and the agent must share one store", main.IPAM.Store, store)
	}
	if len(main.IPAM.Pools) == 0 {
		t.Fatalf("ipam.pools: none")
	}
	var pools []string
	for _, p := range main.IPAM.Pools {
		pools = append(pools, p.CIDR)
	}

	want, err := install.ConfList(install.Network{
		Name:   list.Name,
		Mode:   main.Mode,
		Pools:  pools,
		Store:  main.IPAM.Store,
		MTU:    main.MTU,
		IPMasq: main.IPMasq,
	})
	if err != nil {
		t.Fatalf("podnet install refuses these settings: %v", err)
	}
	var got, wantDoc any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &wantDoc); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, wantDoc) {
		t.Errorf("the ConfigMap's conflist is not what podnet install writes for its settings:\n--- ConfigMap\n%s\n--- podnet install\n%s", data, want)
	}
}

// TestNetValidate runs `podnet net validate` on the ConfigMap's conflist,
// and on the node-CIDR ConfigMap's as the agent installs it, with podnet
// and its plugins built from the main module: every plugin the config
// names exists, runs, and supports its cniVersion.
func TestNetValidate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds podnet and its plugins")
	}
	_, key, data := conflist(t)
	_, ncKey, _, ncData := nodeCIDRConflist(t)
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
	for _, c := range []struct {
		name, key string
		data      []byte
	}{{"etcd", key, data}, {"node-cidr", ncKey, ncData}} {
		t.Run(c.name, func(t *testing.T) {
			netValidate(t, filepath.Join(cliDir, "podnet"), binDir, filepath.Join(tmp, c.name), c.key, c.data)
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
