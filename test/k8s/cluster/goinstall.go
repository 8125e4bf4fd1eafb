package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// goInstall is a set of programs that the harness builds from the Go
// module proxy, `go install pkg@version` outside any module (each
// release's own go.mod, none of podnet's), static, into a cache
// directory beside the Kubernetes binaries: measurement peers, never
// shipped.
type goInstall struct {
	what    string   // for the log, e.g. "the reference CNI plugins"
	dir     string   // the cache directory's name, e.g. cni-plugins-v1.9.1
	version string   // the release, e.g. v1.9.1
	pkgs    []string // the main packages' import paths, without @version
	ldflags string   // -ldflags, as the release's own build sets them ("": none)
}

// bin returns the directory holding the programs, installing them unless
// a build of the same version by the same toolchain is there.
// Concurrent callers wait on the cache's lock.
func (g goInstall) bin(logf func(string, ...any)) (string, error) {
	kube, err := CacheDir()
	if err != nil {
		return "", err
	}
	cache := filepath.Join(filepath.Dir(kube), g.dir)
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("%s are built with go, not in $PATH: %w", g.what, err)
	}
	goVer, err := exec.Command(goTool, "env", "GOVERSION", "GOOS", "GOARCH").Output()
	if err != nil {
		return "", fmt.Errorf("go env: %w", err)
	}
	stamp := g.version + " " + strings.Join(strings.Fields(string(goVer)), " ")
	if g.ldflags != "" {
		stamp += " ldflags=" + g.ldflags
	}
	unlock, err := lockCache(cache)
	if err != nil {
		return "", err
	}
	defer unlock()
	bin := filepath.Join(cache, "bin")
	if data, err := os.ReadFile(filepath.Join(bin, ".stamp")); err == nil && string(data) == stamp && g.present(bin) {
		return bin, nil
	}
	return bin, g.install(logf, goTool, cache, bin, stamp)
}

// present reports whether every program is in bin and executable.
func (g goInstall) present(bin string) bool {
	for _, p := range g.pkgs {
		if fi, err := os.Stat(filepath.Join(bin, filepath.Base(p))); err != nil || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// install installs into a directory of its own first and writes the
// stamp last, as buildKube does: a cut-short install is never reused.
func (g goInstall) install(logf func(string, ...any), goTool, cache, bin, stamp string) error {
	tmp := fmt.Sprintf("%s.tmp-%d", bin, os.Getpid())
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	args := []string{"install", "-trimpath"}
	if g.ldflags != "" {
		args = append(args, "-ldflags="+g.ldflags)
	}
	for _, p := range g.pkgs {
		args = append(args, p+"@"+g.version)
	}
	logf("installing %s %s into %s", g.what, g.version, bin)
	start := time.Now()
	cmd := exec.Command(goTool, args...)
	// Outside any module: `go install pkg@version` builds the release's
	// own go.mod.
	cmd.Dir = cache
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "CGO_ENABLED=0", "GOFLAGS=")
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
