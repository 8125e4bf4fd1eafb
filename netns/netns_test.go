package netns_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

// threadNS identifies the network namespace of the calling OS thread.
func threadNS(t testing.TB) [2]uint64 {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		t.Fatalf("stat own netns: %v", err)
	}
	return [2]uint64{st.Dev, st.Ino}
}

func TestIsNetNS(t *testing.T) {
	file := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path    string
		wantErr error
	}{
		{"/proc/self/ns/net", nil},
		{"/proc/self/ns/mnt", netns.ErrNotNetNS},
		{"/proc/self/ns/uts", netns.ErrNotNetNS},
		{file, netns.ErrNotNetNS},
		{t.TempDir(), netns.ErrNotNetNS},
		{filepath.Join(t.TempDir(), "missing"), fs.ErrNotExist},
		{"", fs.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			err := netns.IsNetNS(tt.path)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("IsNetNS(%q) = %v, want %v", tt.path, err, tt.wantErr)
			}
			if err != nil && tt.path != "" && !strings.Contains(err.Error(), tt.path) {
				t.Errorf("error %q does not name the path", err)
			}
		})
	}
}

func TestSameAsCurrentOwn(t *testing.T) {
	same, err := netns.SameAsCurrent("/proc/thread-self/ns/net")
	if err != nil || !same {
		t.Fatalf("SameAsCurrent(own) = %v, %v; want true", same, err)
	}
	if _, err := netns.SameAsCurrent(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("SameAsCurrent(missing) error = %v, want ErrNotExist", err)
	}
}

func TestDo(t *testing.T) {
	testutil.RequireRoot(t)
	_, path := testutil.NewNetNS(t)
	host := threadNS(t)

	if same, err := netns.SameAsCurrent(path); err != nil || same {
		t.Fatalf("SameAsCurrent(new netns) from host = %v, %v; want false", same, err)
	}
	err := netns.Do(path, func() error {
		same, err := netns.SameAsCurrent(path)
		if err != nil || !same {
			return fmt.Errorf("inside Do, SameAsCurrent = %v, %v", same, err)
		}
		links, err := netlink.LinkList()
		if err != nil {
			return err
		}
		if len(links) != 1 || links[0].Attrs().Name != "lo" {
			return fmt.Errorf("a new netns should hold only lo, got %d links", len(links))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := threadNS(t); got != host {
		t.Fatalf("after Do the caller is in another namespace")
	}

	// fn's error comes back unchanged.
	sentinel := errors.New("sentinel")
	if err := netns.Do(path, func() error { return sentinel }); err != sentinel {
		t.Fatalf("Do returned %v, want fn's error", err)
	}
}

func TestDoRefusesNonNetNS(t *testing.T) {
	called := false
	err := netns.Do("/proc/self/ns/mnt", func() error { called = true; return nil })
	if !errors.Is(err, netns.ErrNotNetNS) || called {
		t.Fatalf("Do(mnt ns) = %v, called=%v; want ErrNotNetNS and fn not called", err, called)
	}
}

func TestDoPanic(t *testing.T) {
	testutil.RequireRoot(t)
	_, path := testutil.NewNetNS(t)
	host := threadNS(t)
	defer func() {
		p := recover()
		pe, ok := p.(*netns.PanicError)
		if !ok || pe.Value != "boom" || len(pe.Stack) == 0 {
			t.Fatalf("recovered %#v, want *PanicError{boom} with a stack", p)
		}
		if threadNS(t) != host {
			t.Fatalf("after a panic in Do the caller is in another namespace")
		}
	}()
	_ = netns.Do(path, func() error { panic("boom") })
}

func TestDoNested(t *testing.T) {
	testutil.RequireRoot(t)
	_, a := testutil.NewNetNS(t)
	_, b := testutil.NewNetNS(t)
	err := netns.Do(a, func() error {
		if err := netns.Do(b, func() error {
			if same, _ := netns.SameAsCurrent(b); !same {
				return errors.New("inner Do is not in b")
			}
			return nil
		}); err != nil {
			return err
		}
		if same, _ := netns.SameAsCurrent(a); !same {
			return errors.New("after the inner Do, the outer one is no longer in a")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDoConcurrent runs many Do calls at once, into different namespaces,
// and checks each ran where it asked and that no thread leaked back into
// the pool in the wrong namespace.
func TestDoConcurrent(t *testing.T) {
	testutil.RequireRoot(t)
	paths := make([]string, 3)
	for i := range paths {
		_, paths[i] = testutil.NewNetNS(t)
	}
	host := threadNS(t)
	var wg sync.WaitGroup
	errs := make(chan error, 300)
	for i := range 300 {
		wg.Go(func() {
			p := paths[i%len(paths)]
			err := netns.Do(p, func() error {
				if same, err := netns.SameAsCurrent(p); err != nil || !same {
					return fmt.Errorf("Do(%s) ran elsewhere (%v)", p, err)
				}
				runtime.Gosched()
				return nil
			})
			if err != nil {
				errs <- err
			}
			if threadNS(t) != host {
				errs <- errors.New("a goroutine ended up outside the host namespace")
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestNewNamed(t *testing.T) {
	testutil.RequireRoot(t)
	name, path := testutil.NewNetNS(t)
	if path != netns.NamedPath(name) {
		t.Fatalf("path %s, want %s", path, netns.NamedPath(name))
	}
	if err := netns.IsNetNS(path); err != nil {
		t.Fatal(err)
	}
	if _, err := netns.NewNamed(name); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("NewNamed(existing) = %v, want ErrExist", err)
	}
	// The failed second NewNamed must not have harmed the first.
	if err := netns.IsNetNS(path); err != nil {
		t.Fatalf("after a refused duplicate: %v", err)
	}
	for range 2 { // idempotent
		if err := netns.DeleteNamed(name); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after DeleteNamed, stat = %v", err)
	}
}

func TestNamedInvalid(t *testing.T) {
	for _, name := range []string{"", ".", "..", "a/b", "../x"} {
		if _, err := netns.NewNamed(name); err == nil {
			t.Errorf("NewNamed(%q) succeeded", name)
		}
		if err := netns.DeleteNamed(name); err == nil {
			t.Errorf("DeleteNamed(%q) succeeded", name)
		}
	}
}

func TestNewNamedConcurrent(t *testing.T) {
	testutil.RequireRoot(t)
	host := threadNS(t)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			name, path := testutil.NewNetNS(t)
			if err := netns.IsNetNS(path); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		})
	}
	wg.Wait()
	if threadNS(t) != host {
		t.Fatal("creating namespaces moved the caller")
	}
}
