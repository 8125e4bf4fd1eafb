package testutil

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
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

// mainModule is podnet's module path: ModuleRoot skips the go.mod of
// the modules nested in the repository (test/k8s, interop, ...).
const mainModule = "github.com/podnet/podnet"

// ModuleRoot returns the root of podnet's main module, found by walking
// up from the current directory to the go.mod that declares it. Tests
// run in their package's directory, so this is the repository's root
// from any test, also from a nested module's (test/k8s builds podnet's
// binaries as the main module's tests do).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && declares(b, mainModule) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of module %s in the current directory or any parent", mainModule)
		}
		dir = parent
	}
}

// declares reports whether the go.mod text gomod declares module path.
func declares(gomod []byte, path string) bool {
	for _, l := range strings.Split(string(gomod), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "module" && strings.Trim(f[1], `"`) == path {
			return true
		}
	}
	return false
}
