package interop

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podnet/podnet/cni"
)

// TestRollbackWithUpstreamPlugins fails the second plugin of a chain
// (tuning, asked for a sysctl that does not exist) after ptp and
// host-local have done their work. podnet's rollback must DEL what ran,
// so nothing is left: no veth, no address held, no cache entry. libcni
// does not roll back; what it leaves is logged, as the defect podnet
// improves on.
func TestRollbackWithUpstreamPlugins(t *testing.T) {
	requireRoot(t)
	path := []string{upstreamBinDir(t)}
	const conf = `{
  "cniVersion": "1.1.0", "name": "%NAME%",
  "plugins": [
    {"type": "ptp", "ipam": {"type": "host-local", "dataDir": "%DIR%/ipam", "ranges": [[{"subnet": "10.99.4.0/24"}]]}},
    {"type": "tuning", "sysctl": {"net.ipv4.conf.IFNAME.pnio_no_such_sysctl": "1"}}
  ]
}`
	for _, mk := range bothLibraries {
		node, pod := newNetNS(t), newNetNS(t)
		stateDir, cacheDir := t.TempDir(), t.TempDir()
		r := mk(path, cacheDir, &node)
		network := uniqueName(t, "pnio-net-")
		a := attachment{ContainerID: uniqueName(t, "pnio-ctr-"), NetNS: pod.Path, IfName: "eth0"}
		c := []byte(strings.NewReplacer("%NAME%", network, "%DIR%", stateDir).Replace(conf))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := r.add(ctx, c, a)
		cancel()
		if err == nil {
			t.Fatalf("%v: ADD with a bad sysctl succeeded", r)
		}
		var left []string
		for _, f := range filesIn(t, stateDir) {
			if ipFile.MatchString(f) {
				left = append(left, "host-local address "+filepath.Base(f))
			}
		}
		for _, l := range snapshot(t, node, newNormalizer(nil)) {
			if strings.HasPrefix(l, "link VETH") {
				left = append(left, "node "+l)
			}
		}
		for _, l := range snapshot(t, pod, newNormalizer(nil)) {
			if strings.HasPrefix(l, "link eth0") {
				left = append(left, "pod "+l)
			}
		}
		if files := filesIn(t, cacheDir); len(files) > 0 {
			left = append(left, "cache "+strings.Join(files, ","))
		}
		if r.String() != "podnet" {
			t.Logf("%v after the failed ADD leaves: %q", r, left)
			continue
		}
		if len(left) > 0 {
			t.Errorf("podnet's rollback leaves: %q\nADD error: %v", left, err)
		}
		var pe *cni.PluginError
		if !errors.As(err, &pe) || pe.Plugin != "tuning" || pe.Index != 1 || pe.Verb != "ADD" {
			t.Errorf("podnet's error does not name the failing plugin (tuning, #1, ADD): %v", err)
		}
		if cni.CodeOf(err) == 0 {
			t.Errorf("podnet's error carries no CNI code: %v", err)
		}
	}
}

// TestDelAfterNetnsGone tears an attachment down after its pod namespace
// was removed, as runtimes do when a sandbox dies first. Both libraries
// must succeed, drop the cache entry, free the address, and leave the
// same node behind. What the upstream plugins themselves cannot undo
// without the namespace (ptp's masquerade rules, found through the pod's
// addresses; tuning's backup file) is the same under both and only
// logged.
func TestDelAfterNetnsGone(t *testing.T) {
	requireRoot(t)
	path := []string{upstreamBinDir(t)}
	sc := scenarios[0] // ptp, tuning, portmap, bandwidth
	for _, v := range []string{"0.3.1", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			network := uniqueName(t, "pnio-net-")
			cid := uniqueName(t, "pnio-ctr-")
			var nodes, files [2][]string
			for i, mk := range bothLibraries {
				s := newSide(t, mk, path)
				s.conf = []byte(strings.NewReplacer("%VERSION%", v, "%NAME%", network, "%DIR%", s.dir).Replace(sc.conf))
				a := attachment{ContainerID: cid, NetNS: s.pod.Path, IfName: "eth0", CapArgs: sc.capArgs}
				if _, err := s.r.add(ctx, s.conf, a); err != nil {
					t.Fatalf("%v ADD: %v", s.r, err)
				}
				s.pod.remove(t)
				if err := s.r.del(ctx, s.conf, a); err != nil {
					t.Errorf("%v DEL with the pod namespace gone: %v", s.r, err)
				}
				if _, err := os.Stat(s.cachePath(network, a)); !os.IsNotExist(err) {
					t.Errorf("%v: cache entry survives DEL (%v)", s.r, err)
				}
				files[i] = filesIn(t, s.dir)
				for _, f := range files[i] {
					if ipFile.MatchString(f) {
						t.Errorf("%v: host-local still holds %s", s.r, f)
					}
				}
				nodes[i] = snapshot(t, s.node, newNormalizer(nil))
				for _, l := range nodes[i] {
					if strings.Contains(l, "link VETH") || strings.Contains(l, "link bwp") || (strings.Contains(l, "DNAT") && strings.Contains(l, cid)) {
						t.Errorf("%v: node keeps %s", s.r, l)
					}
				}
			}
			if d := diffLines("podnet", nodes[0], "libcni", nodes[1]); d != "" {
				t.Errorf("node namespace after DEL differs:\n%s", d)
			}
			if d := diffLines("podnet", files[0], "libcni", files[1]); d != "" {
				t.Errorf("plugin state after DEL differs:\n%s", d)
			}
			var leaks []string
			for _, l := range nodes[0] {
				if strings.Contains(l, cid) {
					leaks = append(leaks, l)
				}
			}
			for _, f := range files[0] {
				if strings.HasPrefix(f, "tuning/") {
					leaks = append(leaks, f)
				}
			}
			if len(leaks) > 0 {
				t.Logf("upstream plugins leave, under either runtime:\n  %s", strings.Join(leaks, "\n  "))
			}
		})
	}
}
