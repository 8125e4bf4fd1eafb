package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/dataplane/policyrules"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

// agentNode is a node namespace with an underlay for podnet agent, and
// the directories its flags name.
type agentNode struct {
	t                               *testing.T
	podnet, ns, confDir, binDir, db string
	netConf                         string // the mounted conflist
}

func newAgentNode(t *testing.T) *agentNode {
	testutil.RequireRoot(t)
	n := &agentNode{t: t, confDir: t.TempDir(), binDir: t.TempDir()}
	n.podnet = testutil.BuildBinary(t, "./cmd/podnet", t.TempDir())
	n.db = filepath.Join(t.TempDir(), "ipam.db")
	n.netConf = filepath.Join(t.TempDir(), "10-podnet.conflist")
	_, n.ns = testutil.NewNodeNetNS(t)
	err := netns.Do(n.ns, func() error {
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "ul0"}, PeerName: "ul0p"}); err != nil {
			return err
		}
		ul, err := netlink.LinkByName("ul0")
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(ul, &netlink.Addr{IPNet: dataplane.IPNet(netip.MustParsePrefix("198.18.0.20/24"))}); err != nil {
			return err
		}
		return netlink.LinkSetUp(ul)
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// start runs podnet agent in the node's namespace with args after the
// common ones; stop sends SIGTERM and waits.
func (n *agentNode) start(args ...string) (stop func() string) {
	n.t.Helper()
	full := append([]string{"--conf-dir", n.confDir, "--bin-dir", n.binDir, "--log-level", "info", "agent",
		"--node", "a", "--underlay-interface", "ul0", "--metrics-addr", "127.0.0.1:9603", "--gc-interval", "0",
		// The node's own record, never the machine's /var/lib/podnet.
		"--sysctl-record", filepath.Join(n.confDir, "sysctls.json")}, args...)
	cmd := exec.Command(n.podnet, full...)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := netns.Do(n.ns, cmd.Start); err != nil {
		n.t.Fatal(err)
	}
	done := false
	stop = func() string {
		if !done {
			done = true
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
		return logs.String()
	}
	n.t.Cleanup(func() { stop() })
	return stop
}

// get asks the agent's HTTP server, from inside the node's namespace.
func (n *agentNode) get(path string) (int, string, error) {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (conn net.Conn, err error) {
		err = netns.Do(n.ns, func() error {
			conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return conn, err
	}}}
	resp, err := c.Get("http://127.0.0.1:9603" + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// nodeState is what a test compares before and after a degraded agent.
type nodeState struct {
	routes   []string
	policy   bool
	conflist string
	db       string
}

func (n *agentNode) state() nodeState {
	n.t.Helper()
	var s nodeState
	err := netns.Do(n.ns, func() error {
		rs, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: syscall.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return err
		}
		for _, r := range rs {
			s.routes = append(s.routes, r.String())
		}
		c, err := nftables.New()
		if err != nil {
			return err
		}
		ts, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
		for _, tb := range ts {
			s.policy = s.policy || tb.Name == policyrules.TableName
		}
		return err
	})
	if err != nil {
		n.t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(n.confDir, "10-podnet.conflist"))
	s.conflist = string(b)
	if st, err := os.Stat(n.db); err == nil {
		s.db = fmt.Sprint(st.Size(), st.ModTime())
	}
	return s
}

const goodConflist = `{"cniVersion":"1.1.0","name":"podnet","plugins":[{"type":"podnet","ipam":{"type":"podnet-ipam","pools":[{"name":"default","cidr":"10.244.0.0/16"}]}}]}`

// TestAgentBadConfigTouchesNothing: a good agent installs the config and
// stops; then, with a setting it cannot use (each one of the ConfigMap's),
// the real agent binary stays up, answers /healthz, says on /readyz (503)
// which setting and why, exports podnet_agent_config_valid 0, and
// changes nothing: routes (one of the agent's protocol that a working
// agent would reconcile away), the policy table (which a working agent
// without --network-policy removes), the installed conflist (which
// --uninstall-on-exit would remove) and the store file.
func TestAgentBadConfigTouchesNothing(t *testing.T) {
	n := newAgentNode(t)
	if err := os.WriteFile(n.netConf, []byte(goodConflist), 0o644); err != nil {
		t.Fatal(err)
	}
	common := []string{"--store", "bolt:" + n.db, "--install", "--src-dir", t.TempDir(), "--network-config", n.netConf}
	// --encryption as the kubelet passes it when the ConfigMap has no
	// key encryption (one of a release before it): none, not degraded.
	stop := n.start(append([]string{"--mode", "host-gw", "--encryption=" + encryptionRef}, common...)...)
	testutil.WaitFor(t, "the good agent ready", 30*time.Second, func() (bool, error) {
		code, _, err := n.get("/readyz")
		return err == nil && code == http.StatusOK, nil
	})
	if logs := stop(); !strings.Contains(logs, "agent ready") {
		t.Fatalf("good agent:\n%s", logs)
	}
	n.addForeignState()
	before := n.state()
	if before.conflist == "" || before.db == "" || !before.policy {
		t.Fatalf("no state to keep: %+v", before)
	}

	for _, tc := range []struct {
		name, conflist, want string
		args                 []string
	}{
		{"routing_mode", goodConflist, `routing_mode "hostgw": want host-gw, vxlan or auto`, []string{"--mode", "hostgw"}},
		{"encryption", goodConflist, `encryption "wireguar": want none or wireguard`, []string{"--mode", "host-gw", "--encryption", "wireguar"}},
		{"cluster_cidr", goodConflist, `cluster_cidr "10.244.0.0": want network prefixes`,
			[]string{"--mode", "host-gw", "--datastore", "kubernetes", "--cluster-cidr", "10.244.0.0"}},
		{"cluster_cidr empty", goodConflist, `cluster_cidr "": want the cluster's pod CIDRs`,
			[]string{"--mode", "host-gw", "--datastore", "kubernetes", "--cluster-cidr="}},
		{"conflist not JSON", `{"cniVersion":`, `10-podnet.conflist "` + n.netConf + `": not valid JSON`, []string{"--mode", "host-gw"}},
		{"not podnet's", `{"cniVersion":"1.1.0","name":"x","plugins":[{"type":"bridge"}]}`, "not a podnet conflist", []string{"--mode", "host-gw"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(n.netConf, []byte(tc.conflist), 0o644); err != nil {
				t.Fatal(err)
			}
			args := append(tc.args, "--store", "bolt:"+n.db, "--install", "--uninstall-on-exit", "--src-dir", t.TempDir(), "--network-config", n.netConf)
			stop := n.start(args...)
			var body string
			testutil.WaitFor(t, "/readyz answers", 20*time.Second, func() (bool, error) {
				code, b, err := n.get("/readyz")
				body = b
				return err == nil && code == http.StatusServiceUnavailable, nil
			})
			if !strings.Contains(body, tc.want) {
				t.Errorf("/readyz:\n%s\nwant %q", body, tc.want)
			}
			if code, _, err := n.get("/healthz"); err != nil || code != http.StatusOK {
				t.Errorf("/healthz: %d, %v", code, err)
			}
			if _, m, err := n.get("/metrics"); err != nil || !strings.Contains(m, "podnet_agent_config_valid 0") {
				t.Errorf("metrics without podnet_agent_config_valid 0 (%v)", err)
			}
			logs := stop()
			if strings.Count(logs, "agent not ready: a setting cannot be used") != 1 {
				t.Errorf("want the reason logged once:\n%s", logs)
			}
			if after := n.state(); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("state changed:\n%+v\n->\n%+v\nlogs:\n%s", before, after, logs)
			}
		})
	}
}

// addForeignState adds what a working agent would change at its start: a
// route of its protocol to no node it knows, and the policy table.
func (n *agentNode) addForeignState() {
	err := netns.Do(n.ns, func() error {
		ul, err := netlink.LinkByName("ul0")
		if err != nil {
			return err
		}
		r := &netlink.Route{LinkIndex: ul.Attrs().Index, Dst: dataplane.IPNet(netip.MustParsePrefix("10.244.5.0/24")),
			Gw: net.ParseIP("198.18.0.21"), Protocol: 97}
		if err := netlink.RouteAdd(r); err != nil {
			return err
		}
		c, err := nftables.New()
		if err != nil {
			return err
		}
		c.AddTable(&nftables.Table{Name: policyrules.TableName, Family: nftables.TableFamilyINet})
		return c.Flush()
	})
	if err != nil {
		n.t.Fatal(err)
	}
}

// TestEncryptionSetting: the DaemonSets' unexpanded reference is the key
// unset (none, as empty); anything else reaches Settings.Check as it is.
func TestEncryptionSetting(t *testing.T) {
	for in, want := range map[string]string{
		encryptionRef: "", "": "", "none": "none", "wireguard": "wireguard",
		"$(PODNET_ROUTING_MODE)": "$(PODNET_ROUTING_MODE)", "$(PODNET_ENCRYPTION) ": "$(PODNET_ENCRYPTION) ",
	} {
		if got := encryptionSetting(in); got != want {
			t.Errorf("encryptionSetting(%q) = %q, want %q", in, got, want)
		}
	}
}
