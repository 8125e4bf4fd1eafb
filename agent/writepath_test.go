package agent

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/bolt"
)

// TestOneWritePath: with block IPAM on the API, the agent's own IPAM
// writers (GC, the release records of DELs, the removal of deleted
// nodes) write through the store the IPAM socket serves, so that its
// cache sees their writes instead of paying a conflict for each.
func TestOneWritePath(t *testing.T) {
	ctx := context.Background()
	store, err := bolt.Open(ctx, bolt.Options{Path: filepath.Join(t.TempDir(), "ipam.db"), HoldOpen: true, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	reg := prometheus.NewRegistry()
	a, err := New(Config{Node: "n", Store: store, Registry: reg, GCInterval: 1,
		Kube: &KubeConfig{REST: &rest.Config{Host: "https://192.0.2.1"}, Blocks: &KubeBlocks{Socket: filepath.Join(t.TempDir(), "ipam.sock")}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.ipamStore().Write(ctx, ipam.Write{Key: "/podnet/x", ModRevision: ipam.AnyRevision, Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	writes := -1.0
	for _, mf := range mfs {
		if mf.GetName() == "podnet_agent_ipam_socket_requests_total" {
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == "write" {
					writes = m.GetCounter().GetValue()
				}
			}
		}
	}
	if writes != 1 {
		t.Fatalf("the agent's own write counted %v times by the socket's server, want 1: it went past the socket's cache", writes)
	}
}
