package interop

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/podnet/podnet/cni"
)

// loUp reports whether lo is up in the namespace.
func loUp(t testing.TB, n netNS) bool {
	t.Helper()
	var links []struct {
		Flags []string `json:"flags"`
	}
	decode(t, run(t, "ip", "-n", n.Name, "-j", "link", "show", "lo"), &links)
	if len(links) != 1 {
		t.Fatalf("netns %s: %d links called lo", n.Name, len(links))
	}
	return slices.Contains(links[0].Flags, "UP")
}

// checkIPVersions checks the "version" of every ips entry of a result
// that podnet wrote: the address family up to 0.4.0, as the
// specification requires there, and absent from 1.0.0 on.
func checkIPVersions(t testing.TB, who string, result []byte) {
	t.Helper()
	var r struct {
		CNIVersion string `json:"cniVersion"`
		IPs        []struct {
			Version *string `json:"version"`
			Address string  `json:"address"`
		} `json:"ips"`
	}
	decode(t, string(result), &r)
	for i, ip := range r.IPs {
		want := "4"
		if strings.Contains(ip.Address, ":") {
			want = "6"
		}
		switch {
		case cni.AtLeast(r.CNIVersion, "1.0.0") && ip.Version != nil:
			t.Errorf("%s: %s result ips[%d] has a version field (%q); 1.0.0 dropped it", who, r.CNIVersion, i, *ip.Version)
		case !cni.AtLeast(r.CNIVersion, "1.0.0") && (ip.Version == nil || *ip.Version != want):
			t.Errorf("%s: %s result ips[%d] (%s): version %v, want %q", who, r.CNIVersion, i, ip.Address, ip.Version, want)
		}
	}
}

// TestLibcniDrivesPodnetLoopback runs podnet's loopback plugin under
// libcni at every version: VERSION, validation, ADD (the same result as
// upstream's loopback gives), CHECK, STATUS, GC and DEL, and DEL again
// once the namespace is gone.
func TestLibcniDrivesPodnetLoopback(t *testing.T) {
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ours := newLibcniRunner([]string{podnetBinDir(t)}, t.TempDir(), nil)
	theirs := newLibcniRunner([]string{upstreamBinDir(t)}, t.TempDir(), nil)

	got, err := ours.versionInfo(ctx, "loopback")
	if err != nil {
		t.Fatalf("VERSION: %v", err)
	}
	for _, v := range append([]string{"0.3.0"}, versions...) {
		if !slices.Contains(got, v) {
			t.Errorf("VERSION: supported versions %v lack %s", got, v)
		}
	}

	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			conf := []byte(`{"cniVersion":"` + v + `","name":"` + uniqueName(t, "pnio-lo-") + `","plugins":[{"type":"loopback"}]}`)
			list, err := ours.parse(conf)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ours.c.ValidateNetworkList(ctx, list); err != nil {
				t.Errorf("libcni ValidateNetworkList: %v", err)
			}
			var res [2]string
			var pods [2]netNS
			for i, r := range []*libcniRunner{ours, theirs} {
				pods[i] = newNetNS(t)
				a := attachment{ContainerID: uniqueName(t, "pnio-ctr-"), NetNS: pods[i].Path, IfName: "eth0"}
				out, err := r.add(ctx, conf, a)
				if err != nil {
					t.Fatalf("ADD (plugin from %s): %v", r.c.Path[0], err)
				}
				if i == 0 {
					checkIPVersions(t, "podnet loopback", out)
				}
				res[i] = newNormalizer(nil, pods[i].Path, "PODNS").json(t, out)
				if !loUp(t, pods[i]) {
					t.Errorf("lo is down after ADD (plugin from %s)", r.c.Path[0])
				}
				if i == 1 {
					continue
				}
				if err := r.check(ctx, conf, a); (err == nil) != cni.AtLeast(v, "0.4.0") {
					t.Errorf("CHECK: %v", err)
				}
				if err := r.status(ctx, conf); err != nil {
					t.Errorf("STATUS: %v", err)
				}
				if err := r.gc(ctx, conf, []attachment{a}); err != nil {
					t.Errorf("GC: %v", err)
				}
				if !loUp(t, pods[i]) {
					t.Errorf("GC that kept the attachment took lo down")
				}
				for n := range 2 {
					if err := r.del(ctx, conf, a); err != nil {
						t.Errorf("DEL #%d: %v", n+1, err)
					}
				}
				if loUp(t, pods[i]) {
					t.Errorf("lo is still up after DEL")
				}
				// The runtime may tear down after the sandbox is gone.
				gone := a
				gone.NetNS = filepath.Join(t.TempDir(), "gone")
				if err := r.del(ctx, conf, gone); err != nil {
					t.Errorf("DEL with the namespace gone: %v", err)
				}
			}
			if d := diffText("podnet loopback", res[0], "upstream loopback", res[1]); d != "" {
				t.Errorf("ADD results differ:\n%s", d)
			}
		})
	}
}

// cnitool runs upstream's cnitool with the network configs in confDir
// and podnet's plugins. cnitool has no cache dir option and writes to
// /var/lib/cni, so it runs in a mount namespace of its own where cacheDir
// is mounted over /var/lib: the host's /var/lib is never touched.
func cnitool(t testing.TB, confDir, cacheDir string, args ...string) (string, error) {
	t.Helper()
	return cnitoolPath(t, confDir, cacheDir, podnetBinDir(t), args...)
}

// cnitoolPath is cnitool with CNI_PATH set to path. The process is born
// in the calling thread's network namespace.
func cnitoolPath(t testing.TB, confDir, cacheDir, path string, args ...string) (string, error) {
	t.Helper()
	script := `mount --bind "$0" /var/lib && exec "$@"`
	argv := append([]string{"--mount", "--propagation", "private", "--", "sh", "-c", script, cacheDir,
		filepath.Join(upstreamBinDir(t), "cnitool")}, args...)
	cmd := exec.Command("unshare", argv...)
	cmd.Env = append(os.Environ(), "NETCONFPATH="+confDir, "CNI_PATH="+path, "CNI_IFNAME=eth0")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestCnitoolDrivesPodnetLoopback runs podnet's loopback plugin under
// upstream's cnitool: add, check, status, del, and gc.
func TestCnitoolDrivesPodnetLoopback(t *testing.T) {
	requireRoot(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("needs unshare(1) to give cnitool a private cache; make deps installs it")
		}
		t.Skip("needs unshare(1) to give cnitool a private cache")
	}
	confDir, cacheDir := t.TempDir(), t.TempDir()
	network := uniqueName(t, "pnio-lo-")
	conf := `{"cniVersion":"1.1.0","name":"` + network + `","plugins":[{"type":"loopback"}]}`
	if err := os.WriteFile(filepath.Join(confDir, "10-lo.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	pod := newNetNS(t)
	cached := func() []string {
		files, _ := filepath.Glob(filepath.Join(cacheDir, "cni", "results", network+"-*"))
		return files
	}
	step := func(verb string) string {
		t.Helper()
		out, err := cnitool(t, confDir, cacheDir, verb, network, pod.Path)
		if err != nil {
			t.Fatalf("cnitool %s: %v\n%s", verb, err, out)
		}
		return out
	}

	out := step("add")
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("cnitool add printed no result: %v\n%s", err, out)
	}
	want := `{"cniVersion":"1.1.0","interfaces":[{"mac":"00:00:00:00:00:00","name":"lo","sandbox":"PODNS"}],` +
		`"ips":[{"address":"127.0.0.1/8","interface":0},{"address":"::1/128","interface":0}]}`
	norm := newNormalizer(nil, pod.Path, "PODNS")
	if d := diffText("cnitool add", norm.json(t, []byte(out)), "want", norm.json(t, []byte(want))); d != "" {
		t.Errorf("cnitool add result:\n%s", d)
	}
	if !loUp(t, pod) || len(cached()) != 1 {
		t.Fatalf("after add: lo up %v, cache entries %v", loUp(t, pod), cached())
	}
	step("check")
	step("status")
	step("del")
	if loUp(t, pod) || len(cached()) != 0 {
		t.Errorf("after del: lo up %v, cache entries %v", loUp(t, pod), cached())
	}
	// gc without a list of valid attachments deletes every cached one.
	step("add")
	step("gc")
	if loUp(t, pod) || len(cached()) != 0 {
		t.Errorf("after gc: lo up %v, cache entries %v", loUp(t, pod), cached())
	}
}
