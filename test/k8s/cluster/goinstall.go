package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// goInstall is a program installed from the Go module proxy at a release,
// as `go install pkg@version` outside any module does it: the release's
// own go.mod chooses every dependency, so nothing in test/k8s pins them.
// The program is static (CGO_ENABLED=0), stripped and built with
// -trimpath, and is kept in cache/bin for as long as the version and the
// Go toolchain stay the same. After the first download the module cache
// holds everything, so later installs need no network.
type goInstall struct {
	what    string // for the log: "CoreDNS v1.15.0"
	cache   string // the program goes to its bin/
	pkg     string // the main package
	version string // the release, e.g. v1.15.0
}

// get returns the program's path, installing it first unless cache/bin
// holds the same version built by the same toolchain. Concurrent callers
// wait on the cache's lock instead of installing twice.
func (g goInstall) get(logf func(string, ...any)) (string, error) {
	if err := os.MkdirAll(g.cache, 0o755); err != nil {
		return "", err
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("%s is built with go, not in $PATH: %w", g.what, err)
	}
	env, err := exec.Command(goTool, "env", "GOVERSION", "GOOS", "GOARCH").Output()
	if err != nil {
		return "", fmt.Errorf("go env: %w", err)
	}
	stamp := g.version + " " + strings.Join(strings.Fields(string(env)), " ")
	unlock, err := lockCache(g.cache)
	if err != nil {
		return "", err
	}
	defer unlock()
	bin := filepath.Join(g.cache, "bin")
	name := path.Base(g.pkg)
	if cached(bin, stamp, []string{name}) {
		return filepath.Join(bin, name), nil
	}
	if err := g.install(logf, goTool, bin, stamp); err != nil {
		return "", err
	}
	return filepath.Join(bin, name), nil
}

// install installs into a directory of its own first and writes the stamp
// last, as cachedBuild.build does: an install cut short is never reused.
func (g goInstall) install(logf func(string, ...any), goTool, bin, stamp string) error {
	tmp := fmt.Sprintf("%s.tmp-%d", bin, os.Getpid())
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	args := []string{"install", "-trimpath", "-ldflags", "-s -w", g.pkg + "@" + g.version}
	logf("installing %s into %s (minutes the first time: the module proxy, then the build)", g.what, bin)
	start := time.Now()
	cmd := exec.Command(goTool, args...)
	// Outside any module, so that the release's go.mod is the one used.
	cmd.Dir = g.cache
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	logf("installed %s in %s", g.what, time.Since(start).Round(time.Second))
	if err := os.RemoveAll(bin); err != nil {
		return err
	}
	if err := os.Rename(tmp, bin); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(bin, ".stamp"), []byte(stamp), 0o644)
}
