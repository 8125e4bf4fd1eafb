package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// KubeVersion is the Kubernetes release kbuild/go.mod pins.
const KubeVersion = "v1.34.4"

// KubeCommands are the Kubernetes programs the harness runs.
var KubeCommands = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl"}

// ModuleDir returns the test/k8s module's directory, found by walking up
// from the working directory (a test's is its package's).
func ModuleDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(data), "module github.com/podnet/podnet/test/k8s\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no test/k8s go.mod above the working directory")
		}
		dir = parent
	}
}

// CacheDir is where the Kubernetes binaries are kept between runs:
// <version> below cacheRoot.
func CacheDir() (string, error) {
	root, err := cacheRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, KubeVersion), nil
}

// cacheRoot holds the harness's builds: $PODNET_K8S_CACHE, else
// podnet-k8s in the user's cache directory ($XDG_CACHE_HOME or ~/.cache).
func cacheRoot() (string, error) {
	if d := os.Getenv("PODNET_K8S_CACHE"); d != "" {
		return d, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory for the harness's builds (set PODNET_K8S_CACHE): %w", err)
	}
	return filepath.Join(base, "podnet-k8s"), nil
}

// KubeBinaries returns a directory holding KubeCommands built from
// kbuild/ at KubeVersion, building them first unless the cache holds a
// build of the same kbuild go.mod and go.sum by the same Go toolchain.
// The build is static (CGO_ENABLED=0) and takes minutes cold; concurrent
// callers wait on a lock instead of building twice.
func KubeBinaries(logf func(string, ...any)) (string, error) {
	b, err := newCachedBuild("Kubernetes "+KubeVersion, "kbuild", KubeVersion)
	if err != nil {
		return "", err
	}
	b.ldflags = "-X k8s.io/component-base/version.gitVersion=" + KubeVersion
	for _, c := range KubeCommands {
		b.pkgs = append(b.pkgs, "k8s.io/kubernetes/cmd/"+c)
	}
	return b.get(logf)
}

// newCachedBuild is the build of what, from the wrapper module wrapper
// (a directory of test/k8s) into name below the cache root; the caller
// adds the packages and flags.
func newCachedBuild(what, wrapper, name string) (cachedBuild, error) {
	mod, err := ModuleDir()
	if err != nil {
		return cachedBuild{}, err
	}
	root, err := cacheRoot()
	if err != nil {
		return cachedBuild{}, err
	}
	return cachedBuild{what: what, modDir: filepath.Join(mod, wrapper), cache: filepath.Join(root, name)}, nil
}

// cachedBuild is a set of programs built from a wrapper module (kbuild,
// cbuild-*, dnsbuild: a go.mod that pins a release) into cache/bin, kept
// there for as long as the wrapper, the build tags and the Go toolchain
// stay the same.
type cachedBuild struct {
	what    string   // for the log: "Kubernetes v1.34.4"
	modDir  string   // the wrapper module
	cache   string   // the programs go to its bin/
	pkgs    []string // main packages, one program each
	tags    string   // -tags
	ldflags string   // added to -s -w

	// testPkgs are packages whose test binary is built too (go test -c),
	// named after the package with .test, as e2e.test is.
	testPkgs []string
}

// get returns cache/bin, building first unless it holds the programs of
// this very build.
func (b cachedBuild) get(logf func(string, ...any)) (string, error) {
	if err := os.MkdirAll(b.cache, 0o755); err != nil {
		return "", err
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("%s is built with go, not in $PATH: %w", b.what, err)
	}
	stamp, err := buildStamp(goTool, b.modDir, b.tags)
	if err != nil {
		return "", err
	}
	unlock, err := lockCache(b.cache)
	if err != nil {
		return "", err
	}
	defer unlock()
	bin := filepath.Join(b.cache, "bin")
	if cached(bin, stamp, b.commands()) {
		return bin, nil
	}
	if err := b.build(logf, goTool, bin, stamp); err != nil {
		return "", err
	}
	return bin, nil
}

// commands are the programs' names, the last elements of their packages.
func (b cachedBuild) commands() []string {
	var cmds []string
	for _, p := range b.pkgs {
		cmds = append(cmds, path.Base(p))
	}
	for _, p := range b.testPkgs {
		cmds = append(cmds, path.Base(p)+".test")
	}
	return cmds
}

// buildStamp identifies a build: what the wrapper module pins (go.mod,
// go.sum), its own Go source if it has any, the build tags, and the
// toolchain and platform that build it. A new Go release rebuilds.
func buildStamp(goTool, modDir, tags string) (string, error) {
	h := sha256.New()
	for _, f := range []string{"go.mod", "go.sum"} {
		data, err := os.ReadFile(filepath.Join(modDir, f))
		if err != nil {
			return "", err
		}
		h.Write(data)
	}
	// dnsbuild's main package chooses what is compiled in, so a change
	// to it is another program. Wrappers without source (kbuild,
	// cbuild-*) add nothing here and keep the stamp they had.
	err := filepath.WalkDir(modDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(modDir, p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %d\n", filepath.ToSlash(rel), len(data))
		h.Write(data)
		return nil
	})
	if err != nil {
		return "", err
	}
	goVer, err := exec.Command(goTool, "env", "GOVERSION").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOVERSION: %w", err)
	}
	fmt.Fprintf(h, "%s %s/%s", strings.TrimSpace(string(goVer)), runtime.GOOS, runtime.GOARCH)
	if tags != "" {
		// Only when set, so that a build without tags keeps the stamp
		// it had before tags were part of it.
		fmt.Fprintf(h, " tags=%s", tags)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// lockCache takes the cache's lock, held across check and build so that
// concurrent test runs build once; unlock releases it.
func lockCache(cache string) (unlock func(), err error) {
	lock, err := os.OpenFile(filepath.Join(cache, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		lock.Close()
		return nil, fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	return func() {
		syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
		lock.Close()
	}, nil
}

// build builds the programs into bin, replacing what is there. It builds
// into a directory of its own first, so a failed build leaves no
// half-filled bin.
func (b cachedBuild) build(logf func(string, ...any), goTool, bin, stamp string) error {
	tmp := fmt.Sprintf("%s.tmp-%d", bin, os.Getpid())
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	flags := []string{"-trimpath", "-ldflags", strings.TrimSpace("-s -w " + b.ldflags), "-o", tmp + "/"}
	if b.tags != "" {
		flags = append(flags, "-tags", b.tags)
	}
	var runs [][]string
	if len(b.pkgs) > 0 {
		runs = append(runs, append(append([]string{"build"}, flags...), b.pkgs...))
	}
	for _, p := range b.testPkgs {
		// -vet=off: vetting a release's tests only slows its build.
		runs = append(runs, append(append([]string{"test", "-c", "-vet=off"}, flags...), p))
	}
	logf("building %s into %s (minutes on a cold cache)", b.what, bin)
	start := time.Now()
	for _, args := range runs {
		cmd := exec.Command(goTool, args...)
		cmd.Dir = b.modDir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=readonly -buildvcs=false")
		if out, err := cmd.CombinedOutput(); err != nil {
			os.RemoveAll(tmp)
			return fmt.Errorf("go %s in %s: %w\n%s", strings.Join(args, " "), b.modDir, err, out)
		}
	}
	logf("built %s in %s", b.what, time.Since(start).Round(time.Second))
	if err := os.RemoveAll(bin); err != nil {
		return err
	}
	if err := os.Rename(tmp, bin); err != nil {
		return err
	}
	// The stamp is written last: a build cut short is never taken for a
	// complete one.
	return os.WriteFile(filepath.Join(bin, ".stamp"), []byte(stamp), 0o644)
}

func cached(bin, stamp string, cmds []string) bool {
	data, err := os.ReadFile(filepath.Join(bin, ".stamp"))
	if err != nil || string(data) != stamp {
		return false
	}
	for _, c := range cmds {
		if fi, err := os.Stat(filepath.Join(bin, c)); err != nil || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// ensureNodeSoftware installs containerd and runc from the distribution
// when they are missing (Debian: containerd 1.6, runc 1.1).
func ensureNodeSoftware(logf func(string, ...any)) error {
	var missing bool
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "ctr", "runc", "nsenter", "ip"} {
		if _, err := exec.LookPath(b); err != nil {
			missing = true
		}
	}
	if !missing {
		return nil
	}
	logf("installing containerd and runc with apt-get")
	for _, args := range [][]string{{"update", "-qq"}, {"install", "-y", "-qq", "containerd", "runc", "iproute2", "util-linux"}} {
		cmd := exec.Command("apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get %s: %w\n%s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// goBuild builds the main package pkg (relative to the test/k8s module,
// or in the module dir given) statically into dst.
func goBuild(dir, pkg, dst string) error {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return err
	}
	cmd := exec.Command(goTool, "build", "-trimpath", "-o", dst, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
	}
	return nil
}
