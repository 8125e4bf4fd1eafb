package install

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/podnet/podnet/cni"
)

func TestPluginsReplaceRunningBinary(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	write := func(body string) {
		if err := os.WriteFile(filepath.Join(src, "p"), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("sleep 5")
	if err := Plugins(src, dst, []string{"p"}); err != nil {
		t.Fatal(err)
	}
	// The old version is running while the new one is installed.
	old := exec.Command(filepath.Join(dst, "p"))
	if err := old.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = old.Process.Kill(); _ = old.Wait() }()
	write("echo new")
	if err := Plugins(src, dst, []string{"p"}); err != nil {
		t.Fatalf("replacing a running plugin: %v", err)
	}
	out, err := exec.Command(filepath.Join(dst, "p")).Output()
	if err != nil || strings.TrimSpace(string(out)) != "new" {
		t.Fatalf("new binary: %q %v", out, err)
	}
	entries, _ := os.ReadDir(dst)
	if len(entries) != 1 {
		t.Errorf("temp files left: %v", entries)
	}
	if err := Plugins(src, dst, []string{"missing"}); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing plugin: %v", err)
	}
}

func TestConfList(t *testing.T) {
	b, err := ConfList(Network{Mode: "bridge", Pools: []string{"10.50.0.0/16"}, MTU: 1400})
	if err != nil {
		t.Fatal(err)
	}
	l, err := cni.ParseNetworkConfigList(b, "x")
	if err != nil {
		t.Fatal(err)
	}
	if l.Name != "podnet" || l.CNIVersion != "1.1.0" || len(l.Plugins) != 1 || l.Plugins[0].IPAMType != "podnet-ipam" || !l.Plugins[0].Capabilities["portMappings"] {
		t.Errorf("%s", b)
	}
	for _, want := range []string{`"mode": "bridge"`, `"cidr": "10.50.0.0/16"`, `"mtu": 1400`, `"store": "bolt:/var/lib/podnet/ipam.db"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("lacks %s:\n%s", want, b)
		}
	}
	chained, err := ConfList(Network{PortmapPlugin: true})
	if err != nil {
		t.Fatal(err)
	}
	if l, err := cni.ParseNetworkConfigList(chained, "x"); err != nil || len(l.Plugins) != 2 || l.Plugins[1].Type != "podnet-portmap" ||
		!l.Plugins[1].Capabilities["portMappings"] || l.Plugins[0].Capabilities["portMappings"] {
		t.Errorf("with PortmapPlugin: %v\n%s", err, chained)
	}
	for _, bad := range []Network{{Mode: "vxlan"}, {Pools: []string{"10.0.0.1/16"}}, {Pools: []string{"nope"}}, {Name: "-x"}, {MTU: -1},
		{Pools: []string{"10.0.0.0/8", "10.1.0.0/16"}}} {
		if _, err := ConfList(bad); err == nil {
			t.Errorf("accepted %+v", bad)
		}
	}
}

// The written config names the pools as masquerade exclusions, so pod to
// pod traffic is never NATed, and declares the versions every runtime in
// use reads: containerd 1.6 reads cniVersion 1.0.0, newer runtimes pick
// 1.1.0 from cniVersions.
func TestConfListMasqExcludeAndVersions(t *testing.T) {
	b, err := ConfList(Network{Pools: []string{"10.50.0.0/16", "fd00:50::/64"}})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		CNIVersion  string   `json:"cniVersion"`
		CNIVersions []string `json:"cniVersions"`
		Plugins     []struct {
			MasqExclude []string `json:"masqExclude"`
			IPAM        struct {
				Pools []struct{ Name, CIDR string } `json:"pools"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.CNIVersion != "1.0.0" || !slices.Equal(doc.CNIVersions, []string{"1.0.0", "1.1.0"}) {
		t.Errorf("versions %q %q:\n%s", doc.CNIVersion, doc.CNIVersions, b)
	}
	l, err := cni.ParseNetworkConfigList(b, "x")
	if err != nil || l.CNIVersion != "1.1.0" {
		t.Errorf("podnet's runtime runs it at %v (%v), want 1.1.0", l, err)
	}
	p := doc.Plugins[0]
	if !slices.Equal(p.MasqExclude, []string{"10.50.0.0/16", "fd00:50::/64"}) {
		t.Errorf("masqExclude %q", p.MasqExclude)
	}
	if len(p.IPAM.Pools) != 2 || p.IPAM.Pools[0].Name != "default" || p.IPAM.Pools[1].Name != "default6" {
		t.Errorf("pools %+v", p.IPAM.Pools)
	}
	off := false
	b, err = ConfList(Network{IPMasq: &off})
	if err != nil || strings.Contains(string(b), "masqExclude") {
		t.Errorf("without masquerade: %v\n%s", err, b)
	}
}

func TestWriteFileAtomic(t *testing.T) {
	p := filepath.Join(t.TempDir(), "net.d", "10-x.conflist")
	for _, body := range []string{"one", "two"} {
		if err := WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(p); string(b) != body {
			t.Fatalf("got %q", b)
		}
	}
	if err := Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := Remove(p); err != nil {
		t.Fatal("second remove:", err)
	}
}
