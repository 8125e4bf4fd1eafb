package testutil

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/podnet/podnet/netns"
)

type fakeGate struct{ skipped, failed bool }

func (*fakeGate) Helper()                 {}
func (g *fakeGate) Skip(...any)           { g.skipped = true }
func (g *fakeGate) Fatalf(string, ...any) { g.failed = true }

func TestRequireRoot(t *testing.T) {
	tests := []struct {
		euid         int
		ci           string
		skip, failed bool
	}{
		{0, "", false, false},
		{0, "true", false, false},
		{1000, "", true, false},
		{1000, "true", false, true},
	}
	for _, tt := range tests {
		var g fakeGate
		requireRoot(&g, tt.euid, tt.ci)
		if g.skipped != tt.skip || g.failed != tt.failed {
			t.Errorf("euid %d CI %q: skipped %v failed %v, want %v %v", tt.euid, tt.ci, g.skipped, g.failed, tt.skip, tt.failed)
		}
	}
}

func TestModuleRoot(t *testing.T) {
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !bytes.Contains(b, []byte("module github.com/podnet/podnet\n")) {
		t.Fatalf("%s is not podnet's module root (%v)", root, err)
	}
}

func TestBuildBinary(t *testing.T) {
	dir := t.TempDir()
	a := BuildBinary(t, "./internal/testplugin", dir)
	b := BuildBinaryAs(t, "./internal/testplugin", dir, "other-name")
	if filepath.Base(a) != "testplugin" || filepath.Base(b) != "other-name" {
		t.Fatalf("paths %s %s", a, b)
	}
	for _, p := range []string{a, b} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm()&0o111 == 0 {
			t.Fatalf("%s: %v %v", p, fi, err)
		}
	}
	builds.Lock()
	n := len(builds.m)
	builds.Unlock()
	if n != 1 {
		t.Fatalf("%d builds cached, want the one package once", n)
	}
}

func TestNewNetNS(t *testing.T) {
	RequireRoot(t)
	var name, path string
	t.Run("inner", func(t *testing.T) {
		name, path = NewNetNS(t)
		if err := netns.IsNetNS(path); err != nil {
			t.Fatal(err)
		}
		if filepath.Base(path) != name || name[:len(NetNSPrefix)] != NetNSPrefix {
			t.Fatalf("name %s path %s", name, path)
		}
	})
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("namespace %s still there after its test: %v", path, err)
	}
}

// A node namespace starts with forwarding off, whatever this machine's own
// namespace has.
func TestNewNodeNetNSForwardingOff(t *testing.T) {
	RequireRoot(t)
	_, path := NewNodeNetNS(t)
	err := netns.Do(path, func() error {
		for _, s := range nodeDefaults {
			b, err := os.ReadFile("/proc/sys/" + s.key)
			if err != nil {
				return err
			}
			if got := strings.TrimSpace(string(b)); got != s.value {
				t.Errorf("%s = %s, want %s", s.key, got, s.value)
			}
		}
		lo, err := netlink.LinkByName("lo")
		if err == nil && lo.Attrs().Flags&net.FlagUp == 0 {
			t.Error("lo is down")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// pollGate records a failure instead of failing the test.
type pollGate struct {
	testing.TB
	failed string
}

func (*pollGate) Helper()                             {}
func (g *pollGate) Fatalf(format string, args ...any) { g.failed = fmt.Sprintf(format, args...) }

func TestWaitFor(t *testing.T) {
	n := 0
	var g pollGate
	WaitFor(&g, "third call", time.Second, func() (bool, error) { n++; return n == 3, nil })
	if g.failed != "" || n != 3 {
		t.Errorf("held at call %d, failure %q", n, g.failed)
	}
	start := time.Now()
	WaitFor(&g, "never", 50*time.Millisecond, func() (bool, error) { return false, errors.New("still down") })
	if want := "never: not within 50ms (last error: still down)"; g.failed != want {
		t.Errorf("failure %q, want %q", g.failed, want)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("gave up after %v", d)
	}
}

func TestWaitProcessGone(t *testing.T) {
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := make(chan struct{})
	go func() { _ = cmd.Wait(); close(reaped) }()
	var g pollGate
	// Still running when the wait ends: killed, and a failure.
	WaitProcessGone(&g, cmd.Process.Pid, 20*time.Millisecond)
	if g.failed == "" {
		t.Error("a running process counted as gone")
	}
	<-reaped
	if !ProcessGone(cmd.Process.Pid) {
		t.Error("a reaped process counted as running")
	}
}

func TestDeclares(t *testing.T) {
	tests := []struct {
		gomod string
		want  bool
	}{
		{"module github.com/podnet/podnet\n\ngo 1.26.0\n", true},
		{"// comment\nmodule \"github.com/podnet/podnet\"\n", true},
		{"module github.com/podnet/podnet/test/k8s\n", false},
		{"go 1.26.0\nrequire github.com/podnet/podnet v0.0.0\n", false},
	}
	for _, tt := range tests {
		if got := declares([]byte(tt.gomod), mainModule); got != tt.want {
			t.Errorf("declares(%q) = %v, want %v", tt.gomod, got, tt.want)
		}
	}
}
