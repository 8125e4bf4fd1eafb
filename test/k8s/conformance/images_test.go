package conformance

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// TestImages builds the images (agnhost and pause stand-ins: a shell
// script each, since this test runs no container) and runs in each,
// chrooted in its unpacked layer, the commands the specs run there: the
// DNS probes' loop with dig and getent, curl, GNU wget and nc, in an
// empty network namespace. Needs root.
func TestImages(t *testing.T) {
	testutil.RequireRoot(t) // chroot
	mod, err := cluster.ModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	kdir, err := KubernetesDir(filepath.Join(mod, "e2ebuild"))
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	stub := filepath.Join(tmp, "stub")
	if err := os.WriteFile(stub, []byte("#!/bin/sh\necho stub \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	archives, err := Build(tmp, Sources{Agnhost: stub, Pause: stub, Regression: stub, CoreDNS: stub, KubernetesDir: kdir}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if len(archives) != len(Images) {
		t.Fatalf("%d archives for %d images", len(archives), len(Images))
	}
	// The regression image is its program alone: no shell to run
	// anything with.
	regRoot := filepath.Join(tmp, "root-regression")
	unpack(t, archives[indexOf(t, RegressionImage)], regRoot)
	if fi, err := os.Stat(filepath.Join(regRoot, "regression-issue-74839")); err != nil || fi.Mode()&0o111 == 0 {
		t.Errorf("regression image: no executable /regression-issue-74839 (%v)", err)
	}
	hosts := "127.0.0.1 localhost\n10.244.0.5 dns-querier-1.dns-test-service.ns.svc.cluster.local dns-querier-1\n"
	for _, tc := range []struct {
		image string
		cmds  []string
	}{
		{AgnhostImage, []string{
			"/agnhost pause | grep -q 'stub pause'",
			"test -s /localhost.crt && test -s /localhost.key && test -d /uploads && test -x /coredns",
			"for i in `seq 1 2`; do dig -v 2>&1 | grep -q DiG && echo OK > /tmp/probe; done; test -s /tmp/probe",
			"curl --version | grep -q '^curl'",
			"wget --version | grep -q 'GNU Wget'",
			"readlink /bin/sh | grep -q dash",
			"test -n \"$(getent hosts dns-querier-1)\"",
			// What the Service specs run: wget and curl against a web
			// server (busybox's, in the foreground and stopped by its
			// PID), on the namespace's own loopback.
			"ip link set lo up && mkdir -p /tmp/www && echo hello > /tmp/www/index.html && " +
				"{ httpd -f -p 127.0.0.1:8000 -h /tmp/www & pid=$!; sleep 0.5; " +
				"wget -q -O - -T 1 http://127.0.0.1:8000/ | grep -q hello && " +
				"curl -q -s --connect-timeout 2 http://127.0.0.1:8000/ | grep -q hello; rc=$?; kill $pid; exit $rc; }",
			"nc -h 2>&1 | grep -q OpenBSD",
		}},
		{JessieDnsutilsImage, []string{
			"dig -v 2>&1 | grep -q DiG",
			"test -n \"$(getent hosts dns-querier-1)\"",
			"test -z \"$(getent hosts no-such-name)\"",
		}},
		{BusyBoxImage, []string{"seq 1 3 | wc -l | grep -q 3", "sleep 0 && hostname | grep -q ."}},
		{IptablesImage, []string{"conntrack --version | grep -q conntrack", "sleep 0"}},
		{NginxImage, nil},
	} {
		t.Run(tc.image, func(t *testing.T) {
			root := filepath.Join(tmp, "root-"+strings.NewReplacer("/", "_", ":", "_").Replace(tc.image))
			unpack(t, archives[indexOf(t, tc.image)], root)
			for _, d := range []string{"etc", "dev", "proc"} {
				if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			// A container's /dev has null, which shells open for
			// background jobs.
			if err := syscall.Mknod(filepath.Join(root, "dev/null"), syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
				t.Fatal(err)
			}
			// What kubelet mounts: /etc/hosts. The commands run in a
			// network namespace of their own, without a route: no
			// query may leave this test.
			if err := os.WriteFile(filepath.Join(root, "etc/hosts"), []byte(hosts), 0o644); err != nil {
				t.Fatal(err)
			}
			if tc.image == NginxImage {
				// No shell in it: nginx checks its configuration, as
				// it reads it to start (its user, its directories).
				cmd := exec.Command("/usr/sbin/nginx", "-t")
				cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Cloneflags: syscall.CLONE_NEWNET}
				cmd.Dir = "/"
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("nginx -t: %v\n%s", err, out)
				}
			}
			for _, c := range tc.cmds {
				// /proc mounted, as in a container: busybox's shell
				// behaves differently without it.
				cmd := exec.Command("unshare", "--mount", "--net", "--mount-proc="+filepath.Join(root, "proc"),
					"chroot", root, "/bin/sh", "-c", c)
				cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("%s: %v\n%s", c, err, out)
				}
			}
		})
	}
}

func indexOf(t *testing.T, image string) int {
	t.Helper()
	for i, n := range Images {
		if n == image {
			return i
		}
	}
	t.Fatalf("no image %s", image)
	return -1
}

// unpack writes the one layer of an OCI archive into root.
func unpack(t *testing.T, archive, root string) {
	t.Helper()
	blobs := map[string][]byte{}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		blobs[h.Name] = data
	}
	var idx struct{ Manifests []struct{ Digest string } }
	if err := json.Unmarshal(blobs["index.json"], &idx); err != nil || len(idx.Manifests) != 1 {
		t.Fatalf("index.json: %v", err)
	}
	blob := func(d string) []byte { return blobs["blobs/sha256/"+strings.TrimPrefix(d, "sha256:")] }
	var man struct{ Layers []struct{ Digest string } }
	if err := json.Unmarshal(blob(idx.Manifests[0].Digest), &man); err != nil || len(man.Layers) != 1 {
		t.Fatalf("manifest: %v", err)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	lr := tar.NewReader(bytes.NewReader(blob(man.Layers[0].Digest)))
	for {
		h, err := lr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(root, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, os.FileMode(h.Mode).Perm())
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, p)
		case tar.TypeReg:
			var data []byte
			if data, err = io.ReadAll(lr); err == nil {
				err = os.WriteFile(p, data, os.FileMode(h.Mode).Perm())
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
