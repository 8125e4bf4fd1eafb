package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/agent/clusterstate"
	"github.com/podnet/podnet/agent/route"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/test/e2e/e2enet"
)

// strictBlocked drops UDP to the WireGuard port on the switch: pod
// traffic is lost and nothing leaves n1 in the clear; once the drop goes,
// traffic resumes encrypted.
func strictBlocked(t *testing.T, c *cluster, cap *capture, src, dst *e2enet.Pod, payload []byte, nodes []*e2enet.Node) {
	t.Helper()
	nft(t, c.U.Hub.Path, fmt.Sprintf("add table bridge podnet_wg_judge\n"+
		"add chain bridge podnet_wg_judge judge { type filter hook forward priority 0; }\n"+
		"add rule bridge podnet_wg_judge judge udp dport %d drop\n", wgPort))
	removed := false
	remove := func() {
		if !removed {
			removed = true
			nft(t, c.U.Hub.Path, "delete table bridge podnet_wg_judge\n")
		}
	}
	t.Cleanup(remove)
	cap.take()
	for _, ip := range []netip.Addr{dst.IP, dst.IP6} {
		if err := exchange(src, dst, ip, payload); err == nil {
			t.Errorf("UDP %d dropped on the underlay, yet pod traffic to %s got through", wgPort, ip)
		} else {
			t.Logf("blocked, as it should be: %s: %v", ip, err)
		}
	}
	frames := cap.take()
	found, clearPods, other := inspect(frames, payload, c, nodes)
	t.Logf("strict: %d frames on sw-n1, payload %d, pod-addressed %d, other %d", len(frames), found, clearPods, len(other))
	if found != 0 || clearPods != 0 || len(other) != 0 {
		t.Errorf("strict: payload found %d times, %d frames with pod addresses, between nodes not WireGuard: %v", found, clearPods, other)
	}
	remove()
	start := time.Now()
	for {
		err := exchange(src, dst, dst.IP, payload)
		if err == nil {
			t.Logf("traffic resumed %v after the drop went", time.Since(start).Round(time.Millisecond))
			break
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("traffic did not resume within 20s of the drop going: %v", err)
		}
	}
}

// nft runs script in the namespace at ns.
func nft(t *testing.T, ns, script string) {
	t.Helper()
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := netns.Do(ns, cmd.Run); err != nil {
		t.Fatalf("nft %q: %v: %s", script, err, out.String())
	}
}

// checkKeyKept: n's key file is 0600; a SIGTERM ends its userspace
// device with the agent; the restarted agent reloads the key (the same
// public key in its record) and the encrypted routes come back.
func checkKeyKept(t *testing.T, c *cluster, n *e2enet.Node) {
	t.Helper()
	keyFile := filepath.Join(n.Dir, "wireguard.key")
	fi, err := os.Stat(keyFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file %s: %v, mode %v; want 0600", keyFile, err, fi.Mode().Perm())
	}
	before := c.NodeRecord(n.Name).WireGuardKey
	c.StopAgent(n, syscall.SIGTERM)
	if _, err := n.NS.Handle.LinkByName(route.WireGuardDevice); err == nil {
		t.Errorf("%s: %s still there after its agent stopped; a userspace device ends with the agent", n.Name, route.WireGuardDevice)
	}
	c.StartAgent(n)
	if after := c.NodeRecord(n.Name).WireGuardKey; after != before || before == "" {
		t.Errorf("%s: public key %q after restart, %q before; want the same, from the kept file", n.Name, after, before)
	}
	other := c.Nodes()[1]
	waitEncryptedRoutes(t, c, n, other)
}

// strictNoKey takes dst's node's key out of its record (kept under its
// lease, as if the key had not arrived yet), then puts a malformed one
// there: src's node routes that node's blocks unreachable, the pod gets
// an error at once, nothing leaves in the clear; with the key back,
// traffic flows encrypted again.
func strictNoKey(t *testing.T, c *cluster, cap *capture, src, dst *e2enet.Pod, payload []byte, nodes []*e2enet.Node) {
	t.Helper()
	from, to := src.Node, dst.Node
	key := clusterstate.NodeKey(ipam.DefaultPrefix, to.Name)
	ctx := t.Context()
	got, err := c.Client.Get(ctx, key)
	if err != nil || len(got.Kvs) != 1 {
		t.Fatalf("get %s: %v", key, err)
	}
	orig, lease := got.Kvs[0].Value, clientv3.LeaseID(got.Kvs[0].Lease)
	put := func(wgKey string) {
		var rec clusterstate.NodeRecord
		if err := json.Unmarshal(orig, &rec); err != nil {
			t.Fatal(err)
		}
		rec.WireGuardKey = wgKey
		b, _ := json.Marshal(rec)
		if _, err := c.Client.Put(ctx, key, string(b), clientv3.WithLease(lease)); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []string{"", "bm90LWEta2V5"} {
		put(bad)
		waitUnreachable(t, c, from, to)
		cap.take()
		for _, ip := range []netip.Addr{dst.IP, dst.IP6} {
			err := exchange(src, dst, ip, payload)
			if err == nil || !errors.Is(err, unix.EHOSTUNREACH) && !errors.Is(err, unix.ENETUNREACH) {
				t.Errorf("key %q: pod traffic to %s: %v; want unreachable", bad, ip, err)
			}
		}
		found, clearPods, other := inspect(cap.take(), payload, c, nodes)
		if found != 0 || clearPods != 0 || len(other) != 0 {
			t.Errorf("key %q: payload found %d times, %d frames with pod addresses, other %v", bad, found, clearPods, other)
		}
	}
	start := time.Now()
	if _, err := c.Client.Put(ctx, key, string(orig), clientv3.WithLease(lease)); err != nil {
		t.Fatal(err)
	}
	waitEncryptedRoutes(t, c, from, to)
	if err := exchange(src, dst, dst.IP, payload); err != nil {
		t.Fatalf("key back: %v", err)
	}
	t.Logf("key back in the record to an encrypted exchange done: %v", time.Since(start).Round(time.Millisecond))
}

// waitUnreachable waits until every block of to is an unreachable route
// on from.
func waitUnreachable(t *testing.T, c *cluster, from, to *e2enet.Node) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		owned, err := route.OwnedRoutes(from.NS.Handle)
		if err != nil {
			t.Fatal(err)
		}
		ok := true
		for _, b := range c.BlocksOf(to.Name) {
			r, have := owned[b]
			ok = ok && have && r.Type == unix.RTN_UNREACHABLE
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: routes to %s's blocks not unreachable after 10s: %v", from.Name, to.Name, owned)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkBadKeyFile: a node whose key file is not a key runs, is not
// ready, says why naming the file, and publishes no key (so its peers
// refuse it rather than send in the clear); the file is left as it was.
func checkBadKeyFile(t *testing.T, c *cluster) {
	t.Helper()
	n := c.addNode(3)
	keyFile := filepath.Join(n.Dir, "wireguard.key")
	if err := os.WriteFile(keyFile, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.LaunchAgent(n)
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := c.Ready(n)
		if err != nil && strings.Contains(err.Error(), keyFile) && strings.Contains(err.Error(), "wireguard") {
			t.Logf("bad key file: not ready, as it should be: %v", err)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent with a bad key file: readiness %v; want not ready naming %s", err, keyFile)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The wireguard service can say why before the source has registered
	// the node (the record is written under its lease a moment later).
	testutil.WaitFor(t, "node "+n.Name+"'s record", 15*time.Second, func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := c.IPAM.Get(ctx, clusterstate.NodeKey(ipam.DefaultPrefix, n.Name))
		if errors.Is(err, ipam.ErrNotFound) {
			return false, nil
		}
		return err == nil, err
	})
	if rec := c.NodeRecord(n.Name); rec.WireGuardKey != "" {
		t.Errorf("node with a bad key file published key %q", rec.WireGuardKey)
	}
	if b, _ := os.ReadFile(keyFile); string(b) != "not a key\n" {
		t.Errorf("bad key file replaced: %q", b)
	}
}

// checkKilled: src's node has a default route through the underlay (as
// a real node has), and its agent is killed (SIGKILL): the userspace
// device ends with it and the kernel drops the routes through it, yet
// pod traffic to dst is refused (the unreachable fallbacks under the
// encrypted routes) rather than sent in the clear to the default
// gateway. The restarted agent brings the encrypted path back.
func checkKilled(t *testing.T, c *cluster, cap *capture, src, dst *e2enet.Pod, payload []byte, nodes []*e2enet.Node) {
	t.Helper()
	n := src.Node
	ul, err := n.NS.Handle.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	def := &netlink.Route{LinkIndex: ul.Attrs().Index, Gw: c.U.Server.AsSlice()}
	if err := n.NS.Handle.RouteAdd(def); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = n.NS.Handle.RouteDel(def) }()
	c.StopAgent(n, syscall.SIGKILL)
	if _, err := n.NS.Handle.LinkByName(route.WireGuardDevice); err == nil {
		t.Errorf("%s: %s still there after its agent was killed", n.Name, route.WireGuardDevice)
	}
	cap.take()
	err = exchange(src, dst, dst.IP, payload)
	if err == nil || !errors.Is(err, unix.EHOSTUNREACH) && !errors.Is(err, unix.ENETUNREACH) {
		t.Errorf("agent killed: pod traffic to %s: %v; want unreachable", dst.IP, err)
	}
	found, clearPods, other := inspect(cap.take(), payload, c, nodes)
	if found != 0 || clearPods != 0 || len(other) != 0 {
		t.Errorf("agent killed: payload found %d times, %d frames with pod addresses, other %v", found, clearPods, other)
	}
	start := time.Now()
	c.StartAgent(n)
	waitEncryptedRoutes(t, c, n, dst.Node)
	if err := exchange(src, dst, dst.IP, payload); err != nil {
		t.Fatalf("agent back: %v", err)
	}
	t.Logf("agent restarted after SIGKILL to an encrypted exchange done: %v", time.Since(start).Round(time.Millisecond))
}

// checkKeyNotLogged: no agent's log holds its private key.
func checkKeyNotLogged(t *testing.T, nodes []*e2enet.Node) {
	t.Helper()
	for _, n := range nodes {
		b, err := os.ReadFile(filepath.Join(n.Dir, "wireguard.key"))
		key := strings.TrimSpace(string(b))
		if err != nil || key == "" {
			t.Errorf("%s: key file: %v", n.Name, err)
			continue
		}
		if log := n.Log(); log == "" || strings.Contains(log, key) {
			t.Errorf("%s: the agent's log (%d bytes) is empty or holds the private key", n.Name, len(log))
		}
	}
}
