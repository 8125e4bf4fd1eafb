package etcdbin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/podnet/podnet/internal/flock"
)

// Environment variables the built server reads (see server/main.go).
const (
	EnvReadyURL      = "PODNET_ETCD_READY_URL"
	EnvStdinLifetime = "PODNET_ETCD_STDIN_LIFETIME"
	buildLockTimeout = 10 * time.Minute
)

var (
	once    sync.Once
	path    string
	pathErr error
)

// Path returns the etcd server binary, building it on first use. The
// build needs the go command in $PATH and the module proxy (or a module
// cache that holds etcd's modules).
func Path() (string, error) {
	once.Do(func() { path, pathErr = build() })
	return path, pathErr
}

func sourceDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("etcdbin: cannot find its own source")
	}
	dir := filepath.Join(filepath.Dir(file), "server")
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("etcdbin: the server module is not at %s: %w", dir, err)
	}
	return dir, nil
}

// stamp names a build by the toolchain and the module's files.
func stamp(goTool, dir string) (string, error) {
	h := sha256.New()
	ver, err := exec.Command(goTool, "env", "GOVERSION", "GOOS", "GOARCH").Output()
	if err != nil {
		return "", fmt.Errorf("etcdbin: go env: %w", err)
	}
	h.Write(ver)
	for _, name := range []string{"go.mod", "go.sum", "main.go"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return "", fmt.Errorf("etcdbin: %w", err)
		}
		fmt.Fprintf(h, "%s %d\n", name, len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

func build() (string, error) {
	dir, err := sourceDir()
	if err != nil {
		return "", err
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("etcdbin: the etcd server is built with go, not in $PATH: %w", err)
	}
	st, err := stamp(goTool, dir)
	if err != nil {
		return "", err
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir() // no $HOME (a bare CI environment): still one cache per machine
	}
	cache := filepath.Join(base, "podnet", "etcd-server")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", fmt.Errorf("etcdbin: %w", err)
	}
	bin := filepath.Join(cache, "etcd-"+st)
	if fi, err := os.Stat(bin); err == nil && fi.Mode()&0o111 != 0 {
		return bin, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), buildLockTimeout)
	defer cancel()
	l, err := flock.AcquireLong(ctx, filepath.Join(cache, ".lock"), buildLockTimeout)
	if err != nil {
		return "", fmt.Errorf("etcdbin: %w", err)
	}
	defer l.Release()
	if fi, err := os.Stat(bin); err == nil && fi.Mode()&0o111 != 0 {
		return bin, nil // another test binary built it while we waited
	}
	tmp := fmt.Sprintf("%s.tmp-%d", bin, os.Getpid())
	cmd := exec.CommandContext(ctx, goTool, "build", "-trimpath", "-o", tmp, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=readonly")
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("etcdbin: go build in %s: %w\n%s", dir, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", fmt.Errorf("etcdbin: %w", err)
	}
	return bin, nil
}
