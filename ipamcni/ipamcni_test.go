package ipamcni

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podnet/podnet/cni"
)

func conf(t *testing.T, db, extra string) []byte {
	t.Helper()
	return []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"net1","type":"podnet","ipam":{"type":"podnet-ipam","store":"bolt:%s","node":"n1",
		"pools":[{"name":"v4","cidr":"10.105.0.0/16"},{"name":"v6","cidr":"fd00:105::/64"}]%s}}`, db, extra))
}

func open(t *testing.T, stdin []byte, args [][2]string) *IPAM {
	t.Helper()
	p := mustOpen(t, stdin, args)
	t.Cleanup(func() { p.Close() })
	return p
}

// use opens the store for fn alone, as a plugin process does for its one
// operation: while one is open, the bbolt file is locked.
func use(t *testing.T, stdin []byte, args [][2]string, fn func(*IPAM)) {
	t.Helper()
	p := mustOpen(t, stdin, args)
	defer p.Close()
	fn(p)
}

func mustOpen(t *testing.T, stdin []byte, args [][2]string) *IPAM {
	t.Helper()
	req, err := ParseRequest(stdin, args)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Open(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAddIsIdempotentAndDelReleases(t *testing.T) {
	db := filepath.Join(t.TempDir(), "ipam.db")
	ctx := context.Background()
	p := open(t, conf(t, db, ""), [][2]string{{"K8S_POD_NAMESPACE", "ns"}, {"K8S_POD_NAME", "web"}})
	r1, err := p.AddAttachment(ctx, PodInterface{ContainerID: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r1.IPs) != 2 || r1.IPs[0].Address.Bits() != 32 || r1.IPs[1].Address.Bits() != 128 || r1.IPs[0].Gateway.IsValid() {
		t.Fatalf("result %s", r1.Bytes())
	}
	r2, err := p.AddAttachment(ctx, PodInterface{ContainerID: "c1"})
	if err != nil || string(r2.Bytes()) != string(r1.Bytes()) {
		t.Fatalf("repeated ADD gave %s, want %s (%v)", r2.Bytes(), r1.Bytes(), err)
	}
	other, err := p.AddAttachment(ctx, PodInterface{ContainerID: "c2"})
	if err != nil || other.IPs[0].Address == r1.IPs[0].Address {
		t.Fatalf("second container: %v %v", other, err)
	}
	if err := p.Check(ctx, "c1", r1); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := p.DelAttachment(ctx, PodInterface{ContainerID: "c1"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Check(ctx, "c1", r1); cni.CodeOf(err) != cni.CodeUnknownContainer {
		t.Errorf("CHECK after DEL: %v", err)
	}
}

func TestConcurrentAddsOneHandle(t *testing.T) {
	db := filepath.Join(t.TempDir(), "ipam.db")
	req, err := ParseRequest(conf(t, db, ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make([]string, 20)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := Open(context.Background(), req)
			if err != nil {
				t.Error(err)
				return
			}
			defer p.Close()
			r, err := p.AddAttachment(context.Background(), PodInterface{ContainerID: "same"})
			if err != nil {
				t.Error(err)
				return
			}
			results[i] = string(r.Bytes())
		}()
	}
	wg.Wait()
	for _, r := range results[1:] {
		if r != results[0] {
			t.Fatalf("20 ADDs of one handle gave different addresses: %s vs %s", r, results[0])
		}
	}
}

func TestPoolPrefixHasNodeGateway(t *testing.T) {
	db := filepath.Join(t.TempDir(), "ipam.db")
	ctx := context.Background()
	p := open(t, conf(t, db, `,"resultPrefix":"pool"`), nil)
	a, err := p.AddAttachment(ctx, PodInterface{ContainerID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.AddAttachment(ctx, PodInterface{ContainerID: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if a.IPs[0].Address.Bits() != 16 || !a.IPs[0].Gateway.IsValid() || a.IPs[0].Gateway != b.IPs[0].Gateway || a.IPs[0].Gateway == a.IPs[0].Address.Addr() {
		t.Fatalf("a %s b %s", a.Bytes(), b.Bytes())
	}
	// GC keeps the gateway even though no attachment is called that.
	if _, err := p.GC(ctx, nil); err != nil {
		t.Fatal(err)
	}
	c, err := p.AddAttachment(ctx, PodInterface{ContainerID: "c"})
	if err != nil || c.IPs[0].Gateway != a.IPs[0].Gateway {
		t.Fatalf("gateway changed after GC: %s", c.Bytes())
	}
}

func TestGCIsScopedToNetworkAndNode(t *testing.T) {
	db := filepath.Join(t.TempDir(), "ipam.db")
	ctx := context.Background()
	net1 := conf(t, db, "")
	net2 := []byte(strings.Replace(string(conf(t, db, "")), `"name":"net1"`, `"name":"net2"`, 1))
	node2 := []byte(strings.Replace(string(conf(t, db, "")), `"node":"n1"`, `"node":"n2"`, 1))
	for _, x := range []struct {
		conf []byte
		id   string
	}{{net1, "keep"}, {net1, "stale"}, {net2, "other-net"}, {node2, "other-node"}} {
		use(t, x.conf, nil, func(p *IPAM) {
			if _, err := p.AddAttachment(ctx, PodInterface{ContainerID: x.id}); err != nil {
				t.Fatal(err)
			}
		})
	}
	use(t, net1, nil, func(p *IPAM) {
		released, err := p.GC(ctx, []cni.GCAttachment{{ContainerID: "keep", IfName: "eth0"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(released) != 2 { // stale's v4 and v6
			t.Errorf("released %v", released)
		}
	})
	for _, x := range []struct {
		conf []byte
		id   string
		want bool
	}{{net1, "keep", true}, {net1, "stale", false}, {net2, "other-net", true}, {node2, "other-node", true}} {
		use(t, x.conf, nil, func(p *IPAM) {
			err := p.Check(ctx, x.id, nil)
			if (err == nil) != x.want {
				t.Errorf("%s after GC: %v", x.id, err)
			}
		})
	}
}

func TestRequestedIPAndErrors(t *testing.T) {
	db := filepath.Join(t.TempDir(), "ipam.db")
	ctx := context.Background()
	use(t, conf(t, db, ""), [][2]string{{"IP", "10.105.7.7"}}, func(p *IPAM) {
		r, err := p.AddAttachment(ctx, PodInterface{ContainerID: "pinned"})
		if err != nil || len(r.IPs) != 1 || r.IPs[0].Address.String() != "10.105.7.7/32" {
			t.Fatalf("%v %v", r, err)
		}
	})
	use(t, conf(t, db, ""), [][2]string{{"IP", "10.105.7.7"}}, func(q *IPAM) {
		if _, err := q.AddAttachment(ctx, PodInterface{ContainerID: "thief"}); cni.CodeOf(err) != cni.CodeAddressConflict {
			t.Errorf("taken address: %v", err)
		}
	})
	for _, bad := range []struct{ extra, want string }{
		{`,"resultPrefix":"wide"`, "resultPrefix"},
		{`,"bogus":1`, "bogus"},
	} {
		if _, err := ParseRequest(conf(t, db, bad.extra), nil); cni.CodeOf(err) != cni.CodeInvalidNetworkConfig || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v", bad.extra, err)
		}
	}
	if _, err := ParseRequest([]byte(`{"name":"n","ipam":{"type":"podnet-ipam","pools":[{"cidr":"10.0.0.0/33"}]}}`), nil); cni.CodeOf(err) != cni.CodeInvalidNetworkConfig || !strings.Contains(err.Error(), "pools[0].cidr") {
		t.Errorf("bad cidr: %v", err)
	}
	req, _ := ParseRequest([]byte(`{"name":"n","ipam":{"type":"podnet-ipam","store":"redis://x","pools":[{"cidr":"10.0.0.0/16"}]}}`), nil)
	if _, err := Open(ctx, req); cni.CodeOf(err) != cni.CodeInvalidNetworkConfig || !strings.Contains(err.Error(), "ipam.store") {
		t.Errorf("bad store: %v", err)
	}
}

func TestUnreachableStoreIsTryAgainLater(t *testing.T) {
	// Port 1 on loopback refuses connections: an etcd that is down.
	req, err := ParseRequest([]byte(`{"name":"n","ipam":{"type":"podnet-ipam","store":"etcd://127.0.0.1:1","node":"n1","pools":[{"cidr":"10.106.0.0/16"}]}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	p, err := Open(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.AddAttachment(ctx, PodInterface{ContainerID: "c"}); cni.CodeOf(err) != cni.CodeTryAgainLater {
		t.Fatalf("ADD with etcd down: code %d: %v", cni.CodeOf(err), err)
	}
}

// TestAgentStoreAbsent: with the agent's socket absent, ADD is code 11
// and DEL succeeds by leaving a release record for the agent's GC.
func TestAgentStoreAbsent(t *testing.T) {
	dir := t.TempDir()
	conf := fmt.Sprintf(`{"name":"n","ipam":{"type":"podnet-ipam","store":"agent:%s/ipam.sock","releaseDir":%q,"nodeLock":%q,"node":"n1","pools":[{"cidr":"10.107.0.0/16"}]}}`, dir, dir+"/releases", dir+"/ipam.lock")
	req, err := ParseRequest([]byte(conf), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	p, err := Open(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.AddAttachment(ctx, PodInterface{ContainerID: "c"}); cni.CodeOf(err) != cni.CodeTryAgainLater || !strings.Contains(err.Error(), "agent store") {
		t.Fatalf("ADD with the agent absent: code %d: %v", cni.CodeOf(err), err)
	}
	rreq, err := ParseReleaseRequest([]byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	if err := Release(ctx, rreq, PodInterface{ContainerID: "c", IfName: "eth0"}); err != nil {
		t.Fatalf("DEL with the agent absent: %v", err)
	}
	if recs, err := ReadReleaseRecords(dir + "/releases"); err != nil || len(recs) != 1 || recs[0].Handle != Handle("n", "c") {
		t.Fatalf("release records %+v, %v; want the one of c", recs, err)
	}
}
