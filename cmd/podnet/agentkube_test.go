package main

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/podnet/podnet/agent"
	"github.com/podnet/podnet/dataplane/policyrules"
)

// TestAgentDatastoreFlags: each datastore takes its own flags, and the
// Kubernetes one defaults to the node-local store the plugins use.
func TestAgentDatastoreFlags(t *testing.T) {
	tests := []struct {
		name    string
		ao      agentOptions
		wantErr string
		store   string // the node-CIDR install's, when no error
	}{
		{"etcd", agentOptions{datastore: "etcd", storeSpec: "etcd://192.0.2.10:2379"}, "", ""},
		{"etcd without store", agentOptions{datastore: "etcd"}, `"store" not set`, ""},
		{"etcd with a kube flag", agentOptions{datastore: "etcd", storeSpec: "etcd://x:1", clusterCIDRs: []string{"10.244.0.0/16"}}, "--datastore kubernetes", ""},
		{"kubernetes", agentOptions{datastore: "kubernetes", doInstall: true, clusterCIDRs: []string{"10.244.0.0/16", "fd00:10:244::/56"}}, "", "bolt:/var/lib/podnet/ipam.db"},
		{"kubernetes, own bolt file", agentOptions{datastore: "kubernetes", storeSpec: "bolt:/tmp/x.db"}, "", "bolt:/tmp/x.db"},
		{"kubernetes with etcd", agentOptions{datastore: "kubernetes", storeSpec: "etcd://x:1"}, "local bolt:PATH", ""},
		{"install without cluster CIDR", agentOptions{datastore: "kubernetes", doInstall: true}, "--cluster-cidr", ""},
		{"bad cluster CIDR", agentOptions{datastore: "kubernetes", clusterCIDRs: []string{"10.244.0.1/16"}}, "network prefix", ""},
		{"unknown", agentOptions{datastore: "consul"}, "want etcd or kubernetes", ""},
		{"etcd with --ipam", agentOptions{datastore: "etcd", storeSpec: "etcd://x:1", ipamModel: "blocks"}, "--datastore kubernetes", ""},
		{"unknown ipam", agentOptions{datastore: "kubernetes", ipamModel: "dhcp"}, "want node-cidr or blocks", ""},
		{"blocks with a bolt store", agentOptions{datastore: "kubernetes", ipamModel: "blocks", storeSpec: "bolt:/tmp/x.db"}, "do not apply", ""},
		{"blocks install without conflist", agentOptions{datastore: "kubernetes", ipamModel: "blocks", doInstall: true}, "--network-config", ""},
		{"blocks", agentOptions{datastore: "kubernetes", ipamModel: "blocks"}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cfg agent.Config
			nc, err := tt.ao.datastoreConfig(&cfg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			blocks := tt.ao.ipamModel == "blocks"
			if (cfg.Kube != nil) != (tt.ao.datastore == "kubernetes") || (nc != nil) != (cfg.Kube != nil && !blocks) ||
				(blocks && cfg.Kube.Blocks == nil) {
				t.Fatalf("Kube %v, node-CIDR install %v", cfg.Kube, nc)
			}
			if nc == nil {
				return
			}
			if nc.Store != tt.store || tt.ao.storeSpec != tt.store {
				t.Errorf("store %q (agent %q), want %q for both", nc.Store, tt.ao.storeSpec, tt.store)
			}
			var want []netip.Prefix
			for _, s := range tt.ao.clusterCIDRs {
				want = append(want, netip.MustParsePrefix(s))
			}
			if !slices.Equal(nc.ClusterCIDRs, want) {
				t.Errorf("cluster CIDRs %v, want %v", nc.ClusterCIDRs, want)
			}
		})
	}
}

// TestAgentDenyLogFlags: --policy-deny-log goes with --network-policy and
// carries its rate, burst and group to the agent; off, the agent gets
// none.
func TestAgentDenyLogFlags(t *testing.T) {
	root := newRootCommand()
	agentCmd, _, err := root.Find([]string{"agent"})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"policy-deny-log", "policy-deny-log-rate", "policy-deny-log-burst", "policy-deny-log-group"} {
		if agentCmd.Flags().Lookup(f) == nil {
			t.Errorf("podnet agent has no --%s", f)
		}
	}
	base := agentOptions{node: "n1", datastore: "kubernetes", mode: "host-gw"}
	off := base
	cfg, err := off.config(&globalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.PolicyDenyLog != nil {
		t.Errorf("deny log on by default: %+v", cfg.PolicyDenyLog)
	}
	alone := base
	alone.denyLog = true
	if _, err := alone.config(&globalOptions{}); err == nil || !strings.Contains(err.Error(), "--network-policy") {
		t.Errorf("--policy-deny-log without --network-policy: %v", err)
	}
	on := base
	on.networkPolicy, on.denyLog = true, true
	on.denyLogCfg.Rate, on.denyLogCfg.Burst, on.denyLogCfg.Group = 3, 4, 5
	cfg, err = on.config(&globalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.PolicyDenyLog == nil || *cfg.PolicyDenyLog != (policyrules.DenyLog{Group: 5, Rate: 3, Burst: 4}) || !cfg.NetworkPolicy {
		t.Errorf("deny log %+v", cfg.PolicyDenyLog)
	}
}
