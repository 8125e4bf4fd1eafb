package testutil

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

// builds caches each package's binary, in memory, for the life of the
// test binary: a plugin is compiled once however many tests run it.
// Keeping bytes rather than a file means nothing is left on disk that
// would need removing after the last test.
var builds struct {
	sync.Mutex
	m map[string]*build
}

type build struct {
	once sync.Once
	bin  []byte
	err  error
}

// BuildBinary builds the main package pkg (an import path, or a path
// relative to the module root such as "./plugins/loopback") and installs
// it in dir under the last element of pkg. It returns the binary's path.
// dir is usually t.TempDir(), which removes it.
func BuildBinary(t testing.TB, pkg, dir string) string {
	t.Helper()
	return BuildBinaryAs(t, pkg, dir, path.Base(pkg))
}

// BuildBinaryAs is BuildBinary with the installed file called name: one
// fake plugin can appear under several plugin types.
func BuildBinaryAs(t testing.TB, pkg, dir, name string) string {
	t.Helper()
	builds.Lock()
	if builds.m == nil {
		builds.m = map[string]*build{}
	}
	b := builds.m[pkg]
	if b == nil {
		b = &build{}
		builds.m[pkg] = b
	}
	builds.Unlock()

	b.once.Do(func() { b.bin, b.err = goBuild(pkg) })
	if b.err != nil {
		t.Fatalf("build %s: %v", pkg, b.err)
	}
	dst := filepath.Join(dir, name)
	if err := writeExecutable(dst, b.bin); err != nil {
		t.Fatalf("install %s: %v", pkg, err)
	}
	return dst
}

// writeExecutable writes the binary while holding syscall.ForkLock, so
// that no child forked concurrently by this process inherits the open
// file descriptor: an inherited writable descriptor makes exec of the
// file fail with ETXTBSY until that child execs.
func writeExecutable(dst string, bin []byte) error {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_CLOEXEC, 0o755)
	if err != nil {
		return err
	}
	if _, err := f.Write(bin); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func goBuild(pkg string) ([]byte, error) {
	root, err := ModuleRoot()
	if err != nil {
		return nil, err
	}
	goTool, err := findGo()
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "podnet-build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "bin")
	cmd := exec.Command(goTool, "build", "-o", out, pkg)
	cmd.Dir = root
	// Static, as `make build` and the image build them: a dynamically
	// linked plugin pays ~1 ms of ld.so on every exec, and tests and
	// benchmarks must run what ships.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go build %s in %s: %v\n%s", pkg, root, err, stderr.String())
	}
	return os.ReadFile(out)
}

// findGo finds the go tool. `go test` puts its own GOROOT/bin first on
// the test binary's PATH, so the plugins are built by the same toolchain
// as the tests; $GOROOT/bin covers a test binary run by hand.
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
	return "", errors.New("go tool not found on PATH or in $GOROOT/bin")
}

// ModuleRoot returns the directory of the go.mod that governs the current
// directory, found by walking up from it. Tests run in their package's
// directory, so this is the root of podnet's module from any test.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod in the current directory or any parent")
		}
		dir = parent
	}
}
