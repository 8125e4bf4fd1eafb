package interop

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
)

// requireRoot skips t when the process is not root, and fails it when CI
// is set: a root test that skips in CI is a test that never runs.
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		requireTools(t)
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("this test needs root, and CI is set")
	}
	t.Skip("needs root (creates network namespaces)")
}

// tools are the programs root tests run: to make and inspect namespaces,
// and for upstream portmap's iptables backend. `make deps` installs them.
var tools = []string{"ip", "tc", "iptables", "iptables-save", "ip6tables", "ip6tables-save", "nft", "unshare", "mount"}

func requireTools(t testing.TB) {
	t.Helper()
	var missing []string
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("missing %v: install iproute2, iptables, nftables and util-linux (make deps)", missing)
	}
}

// uniqueName returns prefix followed by random hex, unique enough for
// names of namespaces, networks and container IDs of concurrent tests.
func uniqueName(t testing.TB, prefix string) string {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return prefix + hex.EncodeToString(b[:])
}

// netNS is a named network namespace a test created.
type netNS struct {
	Name string
	Path string
}

// newNetNS creates a named namespace (`ip netns add`) that t.Cleanup
// deletes whatever happens; with it go every link, address, route, qdisc
// and firewall rule inside it. IPv6 duplicate address detection is off in
// it so that plugins do not wait for addresses to settle.
func newNetNS(t testing.TB) netNS {
	t.Helper()
	name := uniqueName(t, "pnio-")
	run(t, "ip", "netns", "add", name)
	n := netNS{Name: name, Path: filepath.Join("/run/netns", name)}
	t.Cleanup(func() {
		if _, err := os.Stat(n.Path); os.IsNotExist(err) {
			return // the test removed it
		}
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	err := n.do(func() error {
		for _, k := range []string{"all", "default"} {
			if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+k+"/accept_dad", []byte("0"), 0o644); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("netns %s: disable DAD: %v", name, err)
	}
	return n
}

// remove deletes the namespace before the test ends, as a runtime does
// when a sandbox goes away before its network is torn down.
func (n netNS) remove(t testing.TB) {
	t.Helper()
	run(t, "ip", "netns", "del", n.Name)
}

// do runs f on an OS thread switched into the namespace; processes f
// starts are born in it. upstream's ns package does the switching: it
// locks the thread and retires it if the switch back fails.
func (n netNS) do(f func() error) error {
	return ns.WithNetNSPath(n.Path, func(ns.NetNS) error { return f() })
}

// run runs a command and fails t when it fails; it returns stdout.
func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := output(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func output(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// inNS runs a command inside the namespace (`ip netns exec`).
func (n netNS) run(t testing.TB, name string, args ...string) string {
	t.Helper()
	return run(t, "ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}
