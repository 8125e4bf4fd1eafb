package netns

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// This test is internal (it replaces setns), so it cannot use testutil,
// which imports this package; it manages its namespace itself.
func TestDoDiscardsThreadThatCannotReturn(t *testing.T) {
	if unix.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("test needs root, and CI is set: run the tests as root in CI")
		}
		t.Skip("test needs root")
	}
	name := fmt.Sprintf("pntest-discard-%d", os.Getpid())
	path, err := NewNamed(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := DeleteNamed(name); err != nil {
			t.Error(err)
		}
	})
	host := currentThreadNS(t)

	var calls atomic.Int32
	setns = func(fd, nstype int) error {
		if calls.Add(1) == 2 { // the switch back
			return unix.EPERM
		}
		return unix.Setns(fd, nstype)
	}
	t.Cleanup(func() { setns = unix.Setns })

	var ran bool
	err = Do(path, func() error { ran = true; return nil })
	if !ran || err == nil || !errors.Is(err, unix.EPERM) || !strings.Contains(err.Error(), "thread discarded") {
		t.Fatalf("Do = %v (ran %v), want an error saying the thread was discarded", err, ran)
	}
	setns = unix.Setns

	// The thread left in the namespace must be gone: no goroutine, on
	// whatever thread it lands, may find itself there.
	var wg sync.WaitGroup
	var bad atomic.Int32
	for range 200 {
		wg.Go(func() {
			if currentThreadNS(t) != host {
				bad.Add(1)
			}
		})
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d goroutines ran on a thread outside the host namespace", bad.Load())
	}
}

func currentThreadNS(t testing.TB) [2]uint64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var st unix.Stat_t
	if err := unix.Stat(threadSelfNS, &st); err != nil {
		t.Errorf("stat: %v", err)
	}
	return [2]uint64{st.Dev, st.Ino}
}
