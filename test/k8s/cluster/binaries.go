package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// KubeVersion is the Kubernetes release kbuild/go.mod pins.
const KubeVersion = "v1.34.4"

// KubeCommands are the Kubernetes programs the harness runs.
var KubeCommands = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet"}

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
// $PODNET_K8S_CACHE, else podnet-k8s/<version> in the user's cache
// directory ($XDG_CACHE_HOME or ~/.cache).
func CacheDir() (string, error) {
	if d := os.Getenv("PODNET_K8S_CACHE"); d != "" {
		return filepath.Join(d, KubeVersion), nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory for the Kubernetes binaries (set PODNET_K8S_CACHE): %w", err)
	}
	return filepath.Join(base, "podnet-k8s", KubeVersion), nil
}

// KubeBinaries returns a directory holding KubeCommands built from
// kbuild/ at KubeVersion, building them first unless the cache holds a
// build of the same kbuild go.mod and go.sum by the same Go toolchain.
// The build is static (CGO_ENABLED=0) and takes minutes cold; concurrent
// callers wait on a lock instead of building twice.
func KubeBinaries(logf func(string, ...any)) (string, error) {
	mod, err := ModuleDir()
	if err != nil {
		return "", err
	}
	kbuild := filepath.Join(mod, "kbuild")
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the Kubernetes binaries are built with go, not in $PATH: %w", err)
	}
	stamp, err := buildStamp(goTool, kbuild)
	if err != nil {
		return "", err
	}
	unlock, err := lockCache(cache)
	if err != nil {
		return "", err
	}
	defer unlock()
	bin := filepath.Join(cache, "bin")
	if cached(bin, stamp) {
		return bin, nil
	}
	if err := buildKube(logf, goTool, kbuild, bin, stamp); err != nil {
		return "", err
	}
	return bin, nil
}

// buildStamp identifies a build: what kbuild pins (go.mod, go.sum) and
// the toolchain and platform that build it. A new Go release rebuilds.
func buildStamp(goTool, kbuild string) (string, error) {
	h := sha256.New()
	for _, f := range []string{"go.mod", "go.sum"} {
		data, err := os.ReadFile(filepath.Join(kbuild, f))
		if err != nil {
			return "", err
		}
		h.Write(data)
	}
	goVer, err := exec.Command(goTool, "env", "GOVERSION").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOVERSION: %w", err)
	}
	fmt.Fprintf(h, "%s %s/%s", strings.TrimSpace(string(goVer)), runtime.GOOS, runtime.GOARCH)
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

// buildKube builds KubeCommands into bin, replacing what is there. It
// builds into a directory of its own first, so a failed build leaves no
// half-filled bin.
func buildKube(logf func(string, ...any), goTool, kbuild, bin, stamp string) error {
	tmp := fmt.Sprintf("%s.tmp-%d", bin, os.Getpid())
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	args := []string{"build", "-trimpath",
		"-ldflags", "-s -w -X k8s.io/component-base/version.gitVersion=" + KubeVersion,
		"-o", tmp + "/"}
	for _, c := range KubeCommands {
		args = append(args, "k8s.io/kubernetes/cmd/"+c)
	}
	logf("building Kubernetes %s into %s (minutes on a cold cache)", KubeVersion, bin)
	start := time.Now()
	cmd := exec.Command(goTool, args...)
	cmd.Dir = kbuild
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=readonly -buildvcs=false")
	out, err := cmd.CombinedOutput()
	if err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("go %s in %s: %w\n%s", strings.Join(args, " "), kbuild, err, out)
	}
	logf("built Kubernetes %s in %s", KubeVersion, time.Since(start).Round(time.Second))
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

func cached(bin, stamp string) bool {
	data, err := os.ReadFile(filepath.Join(bin, ".stamp"))
	if err != nil || string(data) != stamp {
		return false
	}
	for _, c := range KubeCommands {
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
