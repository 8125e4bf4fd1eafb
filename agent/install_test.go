package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/podnet/podnet/install"
	"github.com/podnet/podnet/ipam"
)

func TestInstall(t *testing.T) {
	src, dst, conf := t.TempDir(), t.TempDir(), t.TempDir()
	for _, p := range []string{"podnet", "podnet-ipam", "loopback"} {
		if err := os.WriteFile(filepath.Join(src, p), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	shipped := filepath.Join(t.TempDir(), "10-podnet.conflist")
	if err := os.WriteFile(shipped, []byte(`{"cniVersion":"1.1.0","name":"podnet","plugins":[
		{"type":"podnet","ipam":{"type":"podnet-ipam","store":"etcd://192.0.2.10:2379"}},
		{"type":"podnet-portmap","capabilities":{"portMappings":true}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		ic   InstallConfig
		file string
	}{
		{"shipped", InstallConfig{SrcDir: src, BinDir: dst, ConfDir: conf, NetworkConfig: shipped}, "10-podnet.conflist"},
		{"generated", InstallConfig{ConfDir: conf, Network: install.Network{Name: "gen", Store: "etcd://192.0.2.10:2379"}}, "10-gen.conflist"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path, err := tt.ic.apply("node-7")
			if err != nil {
				t.Fatal(err)
			}
			if path != filepath.Join(conf, tt.file) {
				t.Fatalf("config at %s, want %s", path, tt.file)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var doc struct {
				Plugins []struct {
					IPAM map[string]any `json:"ipam"`
				} `json:"plugins"`
			}
			if err := json.Unmarshal(b, &doc); err != nil {
				t.Fatal(err)
			}
			if doc.Plugins[0].IPAM["node"] != "node-7" || doc.Plugins[0].IPAM["store"] != "etcd://192.0.2.10:2379" {
				t.Fatalf("ipam %v: want node node-7 and the store", doc.Plugins[0].IPAM)
			}
			if err := tt.ic.uninstall(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Fatalf("config still there after uninstall: %v", err)
			}
		})
	}
	for _, p := range []string{"podnet", "podnet-ipam", "loopback"} {
		if _, err := os.Stat(filepath.Join(dst, p)); err != nil {
			t.Fatal(err)
		}
	}
	bad := &InstallConfig{ConfDir: conf, NetworkConfig: filepath.Join(t.TempDir(), "missing.conflist")}
	if _, err := New(Config{Node: "n", Store: nopStore{}, Install: bad}); err == nil {
		t.Fatal("New with a missing network config: no error")
	}
}

// nopStore is an ipam.Store for tests that never reach the store.
type nopStore struct{ ipam.Store }
