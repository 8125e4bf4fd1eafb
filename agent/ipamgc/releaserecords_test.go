package ipamgc

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/etcd/etcdtest"
	"github.com/podnet/podnet/ipam/store/etcdgw"
	"github.com/podnet/podnet/ipamcni"
)

// TestDelWithStoreDownLeavesReleaseForGC: a DEL while etcd is down
// succeeds and records the release; the agent's GC makes it once etcd is
// back, and an ADD reusing the handle meanwhile keeps its addresses.
func TestDelWithStoreDownLeavesReleaseForGC(t *testing.T) {
	ec := etcdtest.Start(t, 1)
	dir := t.TempDir()
	stdin := []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"net1","type":"podnet","ipam":{"type":"podnet-ipam",
		"store":"etcd://%s","node":"self","releaseDir":%q,"pools":[{"name":"v4","cidr":"10.107.0.0/16"}]}}`,
		strings.TrimPrefix(ec.Endpoints()[0], "http://"), dir))
	pod := func(id string) ipamcni.PodInterface {
		return ipamcni.PodInterface{ContainerID: id, IfName: "eth0", Args: [][2]string{{"K8S_POD_NAMESPACE", "ns"}, {"K8S_POD_NAME", id}}}
	}
	add := func(ctx context.Context, id string) error {
		req, err := ipamcni.ParseRequest(stdin, nil)
		if err != nil {
			t.Fatal(err)
		}
		p, err := ipamcni.Open(ctx, req)
		if err != nil {
			return err
		}
		defer p.Close()
		_, err = p.AddAttachment(ctx, pod(id))
		return err
	}
	del := func(ctx context.Context, id string) error {
		req, err := ipamcni.ParseReleaseRequest(stdin)
		if err != nil {
			t.Fatal(err)
		}
		return ipamcni.Release(ctx, req, pod(id))
	}
	ctx := context.Background()
	for _, id := range []string{"gone", "back"} {
		if err := add(ctx, id); err != nil {
			t.Fatal(err)
		}
	}

	ec.Stop(0)
	for _, id := range []string{"gone", "back"} {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := del(dctx, id)
		cancel()
		if err != nil {
			t.Fatalf("DEL of %s with etcd down: %v, want success and a record", id, err)
		}
	}
	recs, err := ipamcni.ReadReleaseRecords(dir)
	if err != nil || len(recs) != 2 {
		t.Fatalf("records after two DELs: %+v, %v", recs, err)
	}
	ec.Restart(0)
	// The container "back" is added again before the agent gets to it:
	// its record goes, and its address stays its own.
	if err := add(ctx, "back"); err != nil {
		t.Fatal(err)
	}

	store, err := etcdgw.New(etcdgw.Options{Endpoints: ec.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	alloc := ipam.New(store, ipam.Config{})
	c := &collector{alloc: alloc, store: store, node: "self", releaseDir: dir}
	n, err := c.finishReleaseRecords(ctx)
	if err != nil || n != 1 {
		t.Fatalf("GC of the records: released %d, %v; want 1", n, err)
	}
	for id, want := range map[string]int{"gone": 0, "back": 1} {
		ips, err := alloc.IPsByHandle(ctx, "self", ipamcni.Handle("net1", id))
		if err != nil || len(ips) != want {
			t.Errorf("%s holds %v (%v), want %d addresses", id, ips, err, want)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 || ents[0].Name() != ".lock" {
		t.Errorf("release dir keeps %v, want its lock file alone", ents)
	}
	// Clean up the store as a DEL would.
	if err := del(ctx, "back"); err != nil {
		t.Fatal(err)
	}
}
