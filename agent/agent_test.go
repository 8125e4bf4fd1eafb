package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/agent/clusterstate"
	"github.com/podnet/podnet/agent/internal/nodetest"
	"github.com/podnet/podnet/agent/route"
	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/etcd"
	"github.com/podnet/podnet/ipam/store/etcd/etcdtest"
)

const testPool = "10.103.0.0/16"

// cluster is an etcd member on 127.0.0.1 and a client to it; agents run
// in-process, each programming its own test namespace.
type cluster struct {
	etcd  *etcdtest.Cluster
	cli   *clientv3.Client
	store ipam.Store
	alloc *ipam.Allocator
}

func newCluster(t testing.TB) *cluster {
	t.Helper()
	testutil.RequireRoot(t)
	ec := etcdtest.Start(t, 1)
	cli, err := clientv3.New(clientv3.Config{Endpoints: ec.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	c := &cluster{etcd: ec, cli: cli, store: etcd.NewFromClient(cli)}
	c.alloc = ipam.New(c.store, ipam.Config{})
	if err := c.alloc.PutPool(context.Background(), ipam.Pool{Name: "default", CIDR: pfx(testPool)}); err != nil {
		t.Fatal(err)
	}
	return c
}

// runningAgent is an agent goroutine; stop ends it as SIGTERM would.
type runningAgent struct {
	a    *Agent
	stop func()
	done chan error
	once sync.Once
}

func (c *cluster) start(t testing.TB, node *nodetest.Node, name string, mode route.Mode, ttl time.Duration) *runningAgent {
	t.Helper()
	a, err := New(Config{Node: name, Store: c.store, Etcd: c.cli, Mode: mode, UnderlayInterface: "ul0",
		NetNS: node.Path, LeaseTTL: ttl, Logger: testLogger(t, name)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningAgent{a: a, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() { r.halt(t) })
	select {
	case <-a.ReadyC():
	case err := <-r.done:
		t.Fatalf("agent %s exited: %v", name, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("agent %s not ready after 30s: %v", name, a.Ready())
	}
	return r
}

func (r *runningAgent) halt(t testing.TB) {
	r.once.Do(func() {
		r.stop()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("agent exit: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("agent did not stop within 10s")
		}
	})
}

func testLogger(t testing.TB, name string) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("test", t.Name())
	}
	return slog.New(slog.DiscardHandler)
}

func ownedRoute(h *netlink.Handle, dst netip.Prefix) (*netlink.Route, error) {
	owned, err := route.OwnedRoutes(h)
	if err != nil {
		return nil, err
	}
	if r, ok := owned[dst]; ok {
		return &r, nil
	}
	return nil, nil
}

// blockOf allocates one address for a pod on node and returns its block.
func (c *cluster) blockOf(t testing.TB, node, handle string) netip.Prefix {
	t.Helper()
	as, err := c.alloc.AutoAssign(context.Background(), ipam.AutoAssignArgs{Handle: handle, Node: node, Num4: 1})
	if err != nil {
		t.Fatal(err)
	}
	return as.IPv4[0].Masked()
}

func TestAgentHostGW(t *testing.T) {
	c := newCluster(t)
	na := nodetest.New(t, pfx("198.18.0.11/24"))
	nb := nodetest.New(t, pfx("198.18.0.12/24"))
	// A route to b's block that a reconcile from scratch must remove: a
	// leftover of an earlier run. And one podnet does not own.
	stale := &netlink.Route{Dst: dataplane.IPNet(pfx("10.103.200.0/26")), Type: unix.RTN_BLACKHOLE, Protocol: route.RouteProtocol, Table: unix.RT_TABLE_MAIN}
	foreign := &netlink.Route{Dst: dataplane.IPNet(pfx("10.103.201.0/26")), Type: unix.RTN_BLACKHOLE, Table: unix.RT_TABLE_MAIN}
	for _, r := range []*netlink.Route{stale, foreign} {
		if err := na.H.RouteAdd(r); err != nil {
			t.Fatal(err)
		}
	}
	blockA := c.blockOf(t, "a", "net.pod-a")
	if v := na.Sysctl(t, "net/ipv4/ip_forward"); v != "0" {
		t.Fatalf("the node starts with ip_forward %s, want 0 as on a fresh host", v)
	}
	ra := c.start(t, na, "a", route.ModeHostGW, time.Second)
	// The agent makes the node forward pod traffic from its start.
	if v := na.Sysctl(t, "net/ipv4/ip_forward"); v != "1" {
		t.Errorf("ip_forward %s after the agent started, want 1", v)
	}
	if r, _ := ownedRoute(na.H, blockA); r == nil || r.Type != unix.RTN_BLACKHOLE {
		t.Fatalf("own block %s: want a blackhole route, got %+v", blockA, r)
	}
	if r, _ := ownedRoute(na.H, pfx("10.103.200.0/26")); r != nil {
		t.Fatalf("stale owned route survived the first reconcile: %+v", r)
	}
	if ok, _ := routeExists(na.H, pfx("10.103.201.0/26")); !ok {
		t.Fatal("foreign route removed")
	}
	rb := c.start(t, nb, "b", route.ModeHostGW, time.Second)
	blockB := c.blockOf(t, "b", "net.pod-b")
	wantVia := func(h *netlink.Handle, dst netip.Prefix, via string) func() (bool, error) {
		return func() (bool, error) {
			r, err := ownedRoute(h, dst)
			return r != nil && r.Gw.String() == via, err
		}
	}
	testutil.WaitFor(t, "a routes b's block", 5*time.Second, wantVia(na.H, blockB, "198.18.0.12"))
	testutil.WaitFor(t, "b routes a's block", 5*time.Second, wantVia(nb.H, blockA, "198.18.0.11"))

	// Metrics and readiness.
	srv := httptest.NewServer(ra.a.Handler())
	defer srv.Close()
	for path, want := range map[string]string{"/readyz": "ok", "/healthz": "ok", "/metrics": "podnet_agent_routes_programmed 2"} {
		body := get(t, srv.URL+path)
		if !strings.Contains(body, want) {
			t.Errorf("%s: %q does not contain %q", path, body, want)
		}
	}

	// b stops (SIGTERM): its routes stay on b; its lease expires after the
	// TTL and a drops the route to b's block.
	rb.halt(t)
	if r, _ := ownedRoute(nb.H, blockA); r == nil {
		t.Fatal("b's routes removed on exit")
	}
	testutil.WaitFor(t, "a drops b's block after b's lease expires", 10*time.Second, func() (bool, error) {
		r, err := ownedRoute(na.H, blockB)
		return r == nil, err
	})
	// b comes back: routed again.
	c.start(t, nb, "b", route.ModeHostGW, time.Second)
	testutil.WaitFor(t, "a routes b's block again", 5*time.Second, wantVia(na.H, blockB, "198.18.0.12"))

	// b's record removed by hand while b runs: b registers again.
	if _, err := c.cli.Delete(context.Background(), clusterstate.NodeKey(ipam.DefaultPrefix, "b")); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "b registers again", 5*time.Second, func() (bool, error) {
		_, err := c.store.Get(context.Background(), clusterstate.NodeKey(ipam.DefaultPrefix, "b"))
		return err == nil, err
	})
	testutil.WaitFor(t, "a routes b's block after b re-registered", 5*time.Second, wantVia(na.H, blockB, "198.18.0.12"))

	// A block released by b disappears from a.
	if err := c.alloc.ReleaseByHandle(context.Background(), "b", "net.pod-b"); err != nil {
		t.Fatal(err)
	}
	if err := c.alloc.RemoveNode(context.Background(), "b", ipam.RemoveNodeOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "a drops b's released block", 5*time.Second, func() (bool, error) {
		r, err := ownedRoute(na.H, blockB)
		return r == nil, err
	})
}

func TestAgentBorrowedAndVXLAN(t *testing.T) {
	c := newCluster(t)
	na := nodetest.New(t, pfx("198.18.1.11/24"))
	nb := nodetest.New(t, pfx("198.18.2.12/24"))
	// a gets a block; b borrows an address from it with AssignIP.
	blockA := c.blockOf(t, "a", "net.pod-a")
	borrowed := blockA.Addr().Next().Next().Next()
	if _, err := c.alloc.AssignIP(context.Background(), ipam.AssignIPArgs{Handle: "net.pod-b", Node: "b", Addr: borrowed}); err != nil {
		t.Fatal(err)
	}
	c.start(t, na, "a", route.ModeAuto, time.Second)
	c.start(t, nb, "b", route.ModeAuto, time.Second)
	host := netip.PrefixFrom(borrowed, 32)
	testutil.WaitFor(t, "a routes the borrowed address to b over VXLAN", 5*time.Second, func() (bool, error) {
		r, err := ownedRoute(na.H, host)
		return r != nil && r.Gw.String() == "198.18.2.12" && r.Flags&int(netlink.FLAG_ONLINK) != 0, err
	})
	testutil.WaitFor(t, "b routes a's block over VXLAN", 5*time.Second, func() (bool, error) {
		r, err := ownedRoute(nb.H, blockA)
		return r != nil && r.Gw.String() == "198.18.1.11", err
	})
	vx, err := nb.H.LinkByName(route.VXLANDevice)
	if err != nil {
		t.Fatal(err)
	}
	nodetest.CheckPeers(t, nb.H, vx.Attrs().Index, map[string]string{"198.18.1.11": clusterstate.VTEPMAC("a").String()})
	if r, _ := ownedRoute(nb.H, host); r != nil {
		t.Fatalf("b routes its own borrowed address away: %+v", r)
	}
}

func routeExists(h *netlink.Handle, dst netip.Prefix) (bool, error) {
	rs, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: dataplane.IPNet(dst), Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
	return len(rs) > 0, err
}

func get(t testing.TB, url string) string {
	t.Helper()
	resp, err := httpGet(url)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func httpGet(url string) (string, error) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != 200 {
		return string(b), fmt.Errorf("%s: %s", url, resp.Status)
	}
	return string(b), nil
}

var httpClient = &http.Client{Timeout: 5 * time.Second}
