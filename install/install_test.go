package install

import (
	"os"
	"os/exec"
	"path/filepath"
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
	b, err := ConfList(Network{Mode: "bridge", Pool: "10.50.0.0/16", MTU: 1400})
	if err != nil {
		t.Fatal(err)
	}
	l, err := cni.ParseNetworkConfigList(b, "x")
	if err != nil {
		t.Fatal(err)
	}
	if l.Name != "podnet" || l.CNIVersion != cni.CurrentVersion || len(l.Plugins) != 1 || l.Plugins[0].IPAMType != "podnet-ipam" || !l.Plugins[0].Capabilities["portMappings"] {
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
	for _, bad := range []Network{{Mode: "vxlan"}, {Pool: "10.0.0.1/16"}, {Pool: "nope"}, {Name: "-x"}, {MTU: -1}} {
		if _, err := ConfList(bad); err == nil {
			t.Errorf("accepted %+v", bad)
		}
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
