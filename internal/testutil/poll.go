package testutil

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pollInterval is how often the helpers below look again: short next to
// what tests wait for, long enough not to load a busy machine.
const pollInterval = 10 * time.Millisecond

// WaitFor polls cond until it holds, and fails t when timeout passes
// first. The failure names what was awaited and cond's last error, which
// usually says why it did not hold.
func WaitFor(t testing.TB, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	if err := poll(timeout, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Eventually is WaitFor for a condition with no error to report.
func Eventually(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	WaitFor(t, what, timeout, func() (bool, error) { return cond(), nil })
}

// WaitProcessGone waits for process pid, which the test started, to exit.
// One still running after timeout is killed, so that it does not outlive
// the test, and t fails.
func WaitProcessGone(t testing.TB, pid int, timeout time.Duration) {
	t.Helper()
	if err := poll(timeout, func() (bool, error) { return ProcessGone(pid), nil }); err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("process %d: %v", pid, err)
	}
}

// ProcessGone reports whether pid has exited: it is absent, or a zombie
// that only its new parent has not reaped yet.
func ProcessGone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// poll calls cond until it holds, or returns an error saying that it did
// not within timeout, with cond's last error.
func poll(timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("not within %v (last error: %v)", timeout, err)
			}
			return fmt.Errorf("not within %v", timeout)
		}
		time.Sleep(pollInterval)
	}
}
