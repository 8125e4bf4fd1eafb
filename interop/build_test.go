package interop

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// upstreamPkgs are the upstream binaries the tests run, built from the
// module cache at the versions go.mod pins (as tool directives, so that
// `go mod tidy` keeps them and go.sum covers their dependencies).
var upstreamPkgs = []string{
	"github.com/containernetworking/cni/cnitool",
	"github.com/containernetworking/plugins/plugins/ipam/host-local",
	"github.com/containernetworking/plugins/plugins/main/bridge",
	"github.com/containernetworking/plugins/plugins/main/loopback",
	"github.com/containernetworking/plugins/plugins/main/ptp",
	"github.com/containernetworking/plugins/plugins/meta/bandwidth",
	"github.com/containernetworking/plugins/plugins/meta/portmap",
	"github.com/containernetworking/plugins/plugins/meta/tuning",
}

// podnetPkgs are podnet's plugins, built from the main module (../).
var podnetPkgs = []string{"./plugins/loopback", "./plugins/podnet", "./plugins/podnet-portmap"}

// tmpRoot holds what one test binary builds for itself; TestMain removes
// it. Upstream binaries go to bin/ instead, kept between runs.
var tmpRoot string

func TestMain(m *testing.M) {
	var err error
	tmpRoot, err = os.MkdirTemp("", "podnet-interop-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(tmpRoot)
	os.Exit(code)
}

type buildOnce struct {
	once sync.Once
	dir  string
	err  error
}

var (
	upstreamBuild buildOnce
	podnetBuild   buildOnce
	noopBuild     buildOnce
)

// upstreamBinDir returns the directory holding the upstream plugins and
// cnitool. They are built once into bin/upstream-<stamp>, where the stamp
// covers the Go version and go.mod/go.sum: a changed pin or toolchain
// builds afresh, an unchanged one reuses the binaries of an earlier run.
func upstreamBinDir(t testing.TB) string {
	t.Helper()
	upstreamBuild.once.Do(func() { upstreamBuild.dir, upstreamBuild.err = buildUpstream() })
	if upstreamBuild.err != nil {
		t.Fatalf("build upstream binaries: %v", upstreamBuild.err)
	}
	return upstreamBuild.dir
}

// podnetBinDir returns a directory holding podnet's plugins, built from
// the main module for this test binary (the build cache makes it cheap).
func podnetBinDir(t testing.TB) string {
	t.Helper()
	podnetBuild.once.Do(func() {
		dir := filepath.Join(tmpRoot, "podnet")
		podnetBuild.dir, podnetBuild.err = dir, goBuild("..", dir, podnetPkgs...)
	})
	if podnetBuild.err != nil {
		t.Fatalf("build podnet plugins: %v", podnetBuild.err)
	}
	return podnetBuild.dir
}

// noopBinDir returns a directory holding the noop plugin under the names
// noop, noop1, noop2 and noop3, for chains of distinct plugin types.
func noopBinDir(t testing.TB) string {
	t.Helper()
	noopBuild.once.Do(func() {
		dir := filepath.Join(tmpRoot, "noop")
		if noopBuild.err = goBuild(".", dir, "./internal/noop"); noopBuild.err != nil {
			return
		}
		for _, n := range []string{"noop1", "noop2", "noop3"} {
			if err := os.Link(filepath.Join(dir, "noop"), filepath.Join(dir, n)); err != nil {
				noopBuild.err = err
				return
			}
		}
		noopBuild.dir = dir
	})
	if noopBuild.err != nil {
		t.Fatalf("build noop plugin: %v", noopBuild.err)
	}
	return noopBuild.dir
}

func buildUpstream() (string, error) {
	h := sha256.New()
	h.Write([]byte(runtime.Version() + "\n" + strings.Join(upstreamPkgs, "\n")))
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		h.Write(b)
	}
	stamp := hex.EncodeToString(h.Sum(nil))[:16]
	binRoot, err := filepath.Abs("bin")
	if err != nil {
		return "", err
	}
	dir := filepath.Join(binRoot, "upstream-"+stamp)
	if complete(dir) {
		return dir, nil
	}
	if err := os.MkdirAll(binRoot, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(binRoot, ".build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := goBuild(".", tmp, upstreamPkgs...); err != nil {
		return "", err
	}
	// Another test process may have finished the same build first: then
	// the rename fails and its directory, identical, is used.
	if err := os.Rename(tmp, dir); err != nil && !complete(dir) {
		return "", err
	}
	// Builds for other pins are dead weight.
	old, _ := filepath.Glob(filepath.Join(binRoot, "upstream-*"))
	for _, o := range old {
		if o != dir {
			os.RemoveAll(o)
		}
	}
	return dir, nil
}

func complete(dir string) bool {
	for _, p := range upstreamPkgs {
		if _, err := os.Stat(filepath.Join(dir, filepath.Base(p))); err != nil {
			return false
		}
	}
	return true
}

// goBuild builds pkgs in one `go build` invocation (so the compiler
// works on all of them at once) from module directory modDir into dir.
func goBuild(modDir, dir string, pkgs ...string) error {
	goTool, err := findGo()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	args := append([]string{"build", "-buildvcs=false", "-o", dir + "/"}, pkgs...)
	cmd := exec.Command(goTool, args...)
	cmd.Dir = modDir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s (in %s): %v\n%s", strings.Join(args, " "), modDir, err, out.String())
	}
	return nil
}

// findGo finds the go tool: on PATH, else in $GOROOT, which `go test`
// exports to the test binary.
func findGo() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	if root := os.Getenv("GOROOT"); root != "" {
		p := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("go tool not found on PATH or in GOROOT")
}
