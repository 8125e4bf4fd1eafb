package interop

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// podnetChain is podnet's own plugins with upstream meta plugins chained
// after the main one: tuning and bandwidth must work on what podnet made,
// and podnet-portmap must work on podnet's result.
const podnetChain = `{
  "cniVersion": "%VERSION%", "name": "%NAME%",
  "plugins": [
    {"type": "podnet", "mode": "routed", "ipMasq": true, "mtu": 1400,
     "ipam": {"type": "host-local", "dataDir": "%DIR%/ipam", "ranges": [[{"subnet": "10.99.3.0/24"}]]}},
    {"type": "tuning", "dataDir": "%DIR%/tuning", "sysctl": {"net.ipv4.conf.IFNAME.arp_notify": "1"}},
    {"type": "bandwidth", "capabilities": {"bandwidth": true}},
    {"type": "podnet-portmap", "capabilities": {"portMappings": true}}
  ]
}`

// newNetNode is a node namespace with an address of its own (in the
// underlay range), as a real host has: the source of its connections to
// pods and of the 127.0.0.1 traffic that port mapping translates.
func newNetNode(t *testing.T) netNS {
	t.Helper()
	node := newNetNS(t)
	node.run(t, "ip", "link", "set", "lo", "up")
	node.run(t, "ip", "addr", "add", "198.18.5.1/32", "dev", "lo")
	return node
}

func fillConf(tmpl, version, name, dir string) []byte {
	r := strings.NewReplacer("%VERSION%", version, "%NAME%", name, "%DIR%", dir)
	return []byte(r.Replace(tmpl))
}

// podAddr is the pod's IPv4 address from a result.
func podAddr(t testing.TB, res []byte) string {
	t.Helper()
	var r struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(res, &r); err != nil || len(r.IPs) == 0 {
		t.Fatalf("result without addresses: %s", res)
	}
	ip, _, err := net.ParseCIDR(r.IPs[0].Address)
	if err != nil {
		t.Fatal(err)
	}
	return ip.String()
}

// serveOnce listens in the pod on port and answers one connection.
func serveOnce(t *testing.T, pod netNS, port int) {
	t.Helper()
	var ln net.Listener
	if err := pod.do(func() error {
		var err error
		ln, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("pod\n"))
			c.Close()
		}
	}()
}

func dialFrom(n netNS, addr string) error {
	return n.do(func() error {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 4)
		if _, err := c.Read(buf); err != nil || string(buf) != "pod\n" {
			return fmt.Errorf("read %q: %v", buf, err)
		}
		return nil
	})
}

// nodeLeftovers lists what of a pod is still in the node namespace.
func nodeLeftovers(t *testing.T, node netNS, podIP string) []string {
	t.Helper()
	var left []string
	for _, line := range strings.Split(node.run(t, "ip", "-o", "link", "show"), "\n") {
		if strings.Contains(line, ": pn") || strings.Contains(line, ": bwp") {
			left = append(left, "link "+strings.Fields(line)[1])
		}
	}
	if strings.Contains(node.run(t, "ip", "route", "show"), podIP) {
		left = append(left, "route to "+podIP)
	}
	if nft := node.run(t, "nft", "list", "ruleset"); strings.Contains(nft, podIP) {
		left = append(left, "nft element for "+podIP)
	}
	return left
}

// TestLibcniDrivesPodnetPlugins: upstream libcni runs podnet, upstream
// tuning and bandwidth, and podnet-portmap, in a node namespace; the pod
// is reachable by address and through the host port; DEL (twice) leaves
// nothing.
func TestLibcniDrivesPodnetPlugins(t *testing.T) {
	requireRoot(t)
	requireTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, v := range []string{"1.0.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			node, pod := newNetNode(t), newNetNS(t)
			dir := t.TempDir()
			conf := fillConf(podnetChain, v, uniqueName(t, "pnio-pn-"), dir)
			r := newLibcniRunner([]string{podnetBinDir(t), upstreamBinDir(t)}, t.TempDir(), &node)
			a := attachment{ContainerID: uniqueName(t, "pnio-ctr-"), NetNS: pod.Path, IfName: "eth0",
				CapArgs: map[string]any{
					"portMappings": []any{map[string]any{"hostPort": 18090, "containerPort": 80, "protocol": "tcp"}},
					"bandwidth":    map[string]any{"ingressRate": 8000000, "ingressBurst": 80000, "egressRate": 8000000, "egressBurst": 80000},
				}}
			res, err := r.add(ctx, conf, a)
			if err != nil {
				t.Fatalf("ADD: %v", err)
			}
			ip := podAddr(t, res)
			if out := pod.run(t, "ip", "-o", "addr", "show", "dev", "eth0"); !strings.Contains(out, ip+"/32") {
				t.Errorf("pod address: %s", out)
			}
			if out := pod.run(t, "sysctl", "-n", "net.ipv4.conf.eth0.arp_notify"); strings.TrimSpace(out) != "1" {
				t.Errorf("tuning did not apply: %q", out)
			}
			if out := node.run(t, "tc", "qdisc", "show"); !strings.Contains(out, "tbf") {
				t.Errorf("bandwidth installed no shaping: %s", out)
			}
			serveOnce(t, pod, 80)
			if err := dialFrom(node, ip+":80"); err != nil {
				t.Errorf("node -> pod: %v", err)
			}
			if err := dialFrom(node, "127.0.0.1:18090"); err != nil {
				t.Errorf("node -> 127.0.0.1:18090 -> pod: %v", err)
			}
			if err := r.check(ctx, conf, a); err != nil {
				t.Errorf("CHECK: %v", err)
			}
			if err := r.status(ctx, conf); err != nil {
				t.Errorf("STATUS: %v", err)
			}
			for i := range 2 {
				if err := r.del(ctx, conf, a); err != nil {
					t.Fatalf("DEL #%d: %v", i+1, err)
				}
			}
			if left := nodeLeftovers(t, node, ip); len(left) != 0 {
				t.Errorf("left after DEL: %v", left)
			}
			if files, _ := filepath.Glob(filepath.Join(dir, "ipam", "*", "10.*")); len(files) != 0 {
				t.Errorf("addresses still allocated: %v", files)
			}
		})
	}
}

// TestCnitoolDrivesPodnetPlugins: the same chain under upstream cnitool,
// run inside the node namespace.
func TestCnitoolDrivesPodnetPlugins(t *testing.T) {
	requireRoot(t)
	requireTools(t)
	node, pod := newNetNode(t), newNetNS(t)
	confDir, cacheDir, dir := t.TempDir(), t.TempDir(), t.TempDir()
	network := uniqueName(t, "pnio-pn-")
	if err := os.WriteFile(filepath.Join(confDir, "10-pn.conflist"), fillConf(podnetChain, "1.1.0", network, dir), 0o644); err != nil {
		t.Fatal(err)
	}
	step := func(verb string) string {
		t.Helper()
		var out string
		err := node.do(func() error {
			var err error
			out, err = cnitoolPath(t, confDir, cacheDir, podnetBinDir(t)+":"+upstreamBinDir(t), verb, network, pod.Path)
			return err
		})
		if err != nil {
			t.Fatalf("cnitool %s: %v\n%s", verb, err, out)
		}
		return out
	}
	t.Setenv("CAP_ARGS", `{"portMappings":[{"hostPort":18091,"containerPort":80,"protocol":"tcp"}]}`)
	ip := podAddr(t, []byte(step("add")))
	serveOnce(t, pod, 80)
	if err := dialFrom(node, "127.0.0.1:18091"); err != nil {
		t.Errorf("node -> 127.0.0.1:18091 -> pod: %v", err)
	}
	step("check")
	step("status")
	step("del")
	step("del")
	step("gc")
	if left := nodeLeftovers(t, node, ip); len(left) != 0 {
		t.Errorf("left after del: %v", left)
	}
}
