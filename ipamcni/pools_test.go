package ipamcni

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/ipam"
)

// TestInvalidPoolInStore: a pool the store holds an invalid value for
// (here a node selector with a set-based term) fails the ADDs whose config
// names it with code 7 naming the pool and what is wrong, is not
// overwritten by the config's seed, and leaves the ADDs of a network
// naming other pools alone.
func TestInvalidPoolInStore(t *testing.T) {
	db := filepath.Join(t.TempDir(), "ipam.db")
	ctx := context.Background()
	bad := []byte(`{"name":"v6","cidr":"fd00:105::/64","nodeSelector":"zone in (a,b)"}`)
	use(t, conf(t, db, ""), nil, func(p *IPAM) {
		if _, err := p.AddAttachment(ctx, PodInterface{ContainerID: "c0"}); err != nil {
			t.Fatal(err)
		}
		// As an admin's edit would, behind the plugin's back.
		key := ipam.Keys{}.Pool("v6")
		kv, err := p.store.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.store.Write(ctx, ipam.Write{Key: key, ModRevision: kv.ModRevision, Value: bad}); err != nil {
			t.Fatal(err)
		}
	})
	use(t, conf(t, db, ""), nil, func(p *IPAM) {
		_, err := p.AddAttachment(ctx, PodInterface{ContainerID: "c1"})
		if cni.CodeOf(err) != cni.CodeInvalidNetworkConfig || !strings.Contains(err.Error(), `pool "v6"`) ||
			!strings.Contains(err.Error(), `nodeSelector "zone in (a,b)"`) {
			t.Errorf("ADD naming the invalid pool: code %d: %v; want 7 naming pool v6 and its nodeSelector", cni.CodeOf(err), err)
		}
		if err := p.ensurePools(ctx); err != nil {
			t.Fatal(err)
		}
		if kv, err := p.store.Get(ctx, ipam.Keys{}.Pool("v6")); err != nil || string(kv.Value) != string(bad) {
			t.Errorf("after seeding the config's pools, v6 is %s (%v); want the invalid value left for an admin", kv.Value, err)
		}
		if err := p.Status(ctx); err != nil {
			t.Errorf("STATUS: %v", err)
		}
	})
	v4only := []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"net1","type":"podnet","ipam":{"type":"podnet-ipam","store":"bolt:%s","node":"n1",
		"pools":[{"name":"v4","cidr":"10.105.0.0/16"}]}}`, db))
	use(t, v4only, nil, func(p *IPAM) {
		if r, err := p.AddAttachment(ctx, PodInterface{ContainerID: "c2"}); err != nil || len(r.IPs) != 1 {
			t.Fatalf("ADD naming the valid pool only: %v, %v", r, err)
		}
	})
}

// TestPoolNodeSelectorRefused: podnet does not apply pool node selectors
// (no node labels reach the plugins' allocator), so a network config
// that sets one is refused naming the field, and a stored pool with a
// valid selector (an admin's edit) is never allocated from: an ADD that
// names it fails with code 7 saying so, and one that does not is served
// by the other pools, not by it on a node it may have meant to exclude.
func TestPoolNodeSelectorRefused(t *testing.T) {
	db := filepath.Join(t.TempDir(), "ipam.db")
	ctx := context.Background()
	withSel := []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"net1","type":"podnet","ipam":{"type":"podnet-ipam","store":"bolt:%s","node":"n1",
		"pools":[{"name":"v4","cidr":"10.105.0.0/16","nodeSelector":"zone=a"}]}}`, db))
	_, err := ParseRequest(withSel, nil)
	if cni.CodeOf(err) != cni.CodeInvalidNetworkConfig || !strings.Contains(err.Error(), "pools[0].nodeSelector") {
		t.Fatalf("config with a pool nodeSelector: %v; want code 7 naming pools[0].nodeSelector", err)
	}
	use(t, conf(t, db, ""), nil, func(p *IPAM) {
		if _, err := p.AddAttachment(ctx, PodInterface{ContainerID: "c0"}); err != nil {
			t.Fatal(err)
		}
		key := ipam.Keys{}.Pool("v6")
		kv, err := p.store.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		sel := []byte(`{"name":"v6","cidr":"fd00:105::/64","nodeSelector":"zone=a"}`)
		if _, err := p.store.Write(ctx, ipam.Write{Key: key, ModRevision: kv.ModRevision, Value: sel}); err != nil {
			t.Fatal(err)
		}
	})
	use(t, conf(t, db, ""), nil, func(p *IPAM) {
		_, err := p.AddAttachment(ctx, PodInterface{ContainerID: "c1"})
		if cni.CodeOf(err) != cni.CodeInvalidNetworkConfig || !strings.Contains(err.Error(), `nodeSelector "zone=a"`) ||
			!strings.Contains(err.Error(), "does not apply pool node selectors") {
			t.Errorf("ADD naming the pool with a selector: code %d: %v; want 7 saying the selector is not applied", cni.CodeOf(err), err)
		}
	})
}
