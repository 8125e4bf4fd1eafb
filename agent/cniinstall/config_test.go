package cniinstall

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/podnet/podnet/install"
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
		ic   Config
		file string
	}{
		{"shipped", Config{SrcDir: src, BinDir: dst, ConfDir: conf, NetworkConfig: shipped}, "10-podnet.conflist"},
		{"generated", Config{ConfDir: conf, Network: install.Network{Name: "gen", Store: "etcd://192.0.2.10:2379"}}, "10-gen.conflist"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path, _, err := tt.ic.apply("node-7", nil)
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
	missing := filepath.Join(t.TempDir(), "missing.conflist")
	bad := &Config{ConfDir: conf, NetworkConfig: missing}
	if err := bad.Check("n"); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Check of a missing network config: %v, want an error naming it", err)
	}
}

// TestInstallNodeCIDR: in the node-CIDR model the shipped conflist's
// podnet-ipam gets one pool per podCIDR, named after it, in blocks that
// fit it, in the node-local store, and the plugin excludes the cluster's
// CIDRs from masquerade; the rest of the file is kept.
func TestInstallNodeCIDR(t *testing.T) {
	shipped := filepath.Join(t.TempDir(), "10-podnet.conflist")
	if err := os.WriteFile(shipped, []byte(`{"cniVersion":"1.0.0","name":"podnet","plugins":[
		{"type":"podnet","mode":"routed","mtu":1400,"ipMasq":true,"ipam":{"type":"podnet-ipam","store":"bolt:/elsewhere.db","pools":[{"name":"x","cidr":"192.0.2.0/24"}]}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ic := Config{ConfDir: t.TempDir(), NetworkConfig: shipped, NodeCIDR: &NodeCIDR{
		Store: "bolt:/var/lib/podnet/ipam.db", ClusterCIDRs: []netip.Prefix{pfx("10.244.0.0/16"), pfx("fd00:10:244::/56")}}}
	f, err := ic.conf("node-1", []netip.Prefix{pfx("10.244.1.0/24"), pfx("fd00:10:244:1::/64")})
	if err != nil {
		t.Fatal(err)
	}
	b := f.data
	var doc struct {
		Plugins []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	p := doc.Plugins[0]
	want := map[string]any{
		"type": "podnet-ipam", "store": "bolt:/var/lib/podnet/ipam.db", "node": "node-1",
		"pools": []any{
			map[string]any{"name": "node-10.244.1.0-24", "cidr": "10.244.1.0/24", "blockSize": 26.0},
			map[string]any{"name": "node-fd00-10-244-1---64", "cidr": "fd00:10:244:1::/64", "blockSize": 122.0},
		},
	}
	if !reflect.DeepEqual(p["ipam"], want) {
		t.Errorf("ipam %v\nwant %v", p["ipam"], want)
	}
	if got := p["masqExclude"]; !reflect.DeepEqual(got, []any{"10.244.0.0/16", "fd00:10:244::/56"}) {
		t.Errorf("masqExclude %v, want the cluster CIDRs", got)
	}
	if p["mtu"] != 1400.0 || p["mode"] != "routed" {
		t.Errorf("plugin %v: the shipped settings are gone", p)
	}

	for _, tt := range []struct {
		name string
		n    NodeCIDR
		cidr []netip.Prefix
	}{
		{"etcd store", NodeCIDR{Store: "etcd://192.0.2.10:2379", ClusterCIDRs: []netip.Prefix{pfx("10.244.0.0/16")}}, []netip.Prefix{pfx("10.244.1.0/24")}},
		{"masquerade without cluster CIDRs", NodeCIDR{Store: "bolt:/x.db"}, []netip.Prefix{pfx("10.244.1.0/24")}},
		{"no podCIDRs", NodeCIDR{Store: "bolt:/x.db", ClusterCIDRs: []netip.Prefix{pfx("10.244.0.0/16")}}, nil},
	} {
		ic.NodeCIDR = &tt.n
		if _, err := ic.conf("node-1", tt.cidr); err == nil {
			t.Errorf("%s: no error", tt.name)
		}
	}
}

func TestNodeCIDRBlockSize(t *testing.T) {
	for cidr, want := range map[string]int{"10.244.1.0/24": 26, "10.244.1.0/26": 26, "10.244.1.0/28": 28, "fd00::/64": 122, "fd00::/124": 124} {
		if got := NodeCIDRBlockSize(pfx(cidr)); got != want {
			t.Errorf("%s: block size %d, want %d", cidr, got, want)
		}
	}
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
