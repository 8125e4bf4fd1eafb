package conformance

import (
	"context"
	"os/exec"
	"syscall"
	"time"
)

// RunGroup runs cmd in a process group of its own (a runner and the
// processes it starts: ginkgo and its e2e.test processes, test2json and
// a suite) and returns its Wait error. When ctx ends first it stops the
// whole group, SIGTERM then, 30 s later, SIGKILL, and reports cancelled:
// the group is the one this Start made, so nothing else is signalled.
func RunGroup(ctx context.Context, cmd *exec.Cmd) (cancelled bool, err error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		return false, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
		return false, err
	case <-ctx.Done():
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		err = <-done
	}
	return true, err
}
