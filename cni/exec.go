package cni

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/podnet/podnet/netns"
)

// Exec runs plugin binaries. Runtime uses RawExec; unit tests of pure
// chaining logic may substitute a fake.
type Exec interface {
	// ExecPlugin runs the plugin at path with stdin and the environment
	// env, and returns what it wrote to stdout. A plugin that fails
	// yields an error: its own CNI error when it printed one.
	ExecPlugin(ctx context.Context, path string, stdin []byte, env []string) ([]byte, error)
	// FindInPath returns the path of the executable plugin in dirs.
	FindInPath(plugin string, dirs []string) (string, error)
}

// RawExec executes plugins as child processes. Each plugin runs in its own
// process group so that a timeout ends the plugin and every process it
// started, not only the plugin itself.
type RawExec struct {
	// KillGrace is how long a plugin has between SIGTERM and SIGKILL once
	// its context is done. Zero means DefaultKillGrace.
	KillGrace time.Duration
	// HostNetNS, when set, is the network namespace plugins are started
	// in instead of the caller's: the "host" of the pods, for benchmarks
	// and tests that must not touch the real host's network.
	HostNetNS string
	// SameProcessGroup leaves the plugin in the caller's process group:
	// for a plugin delegating to another (its IPAM), so that a runtime
	// that ends the caller's group on a timeout ends the delegate too. On
	// cancellation only the delegate is signalled, never the caller's group.
	SameProcessGroup bool
}

// DefaultKillGrace is the time a plugin gets to exit after SIGTERM.
const DefaultKillGrace = 2 * time.Second

// maxBusyRetries bounds the retries for ETXTBSY, which a plugin binary
// being replaced on disk can cause for a few milliseconds.
const maxBusyRetries = 8

// ExecPlugin implements Exec.
func (e *RawExec) ExecPlugin(ctx context.Context, path string, stdin []byte, env []string) ([]byte, error) {
	delay := 5 * time.Millisecond
	for attempt := 0; ; attempt++ {
		out, err := e.run(ctx, path, stdin, env)
		if !errors.Is(err, syscall.ETXTBSY) || attempt == maxBusyRetries {
			return out, err
		}
		// A fresh exec.Cmd on every attempt: one that was started cannot
		// be started again.
		select {
		case <-ctx.Done():
			return nil, runtimeErrorf(CodeTimeout, "plugin %s: %v while its binary was busy: %v", path, ctx.Err(), err)
		case <-time.After(delay):
		}
		delay *= 2
	}
}

func (e *RawExec) run(ctx context.Context, path string, stdin []byte, env []string) ([]byte, error) {
	grace := e.KillGrace
	if grace <= 0 {
		grace = DefaultKillGrace
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path)
	cmd.Env = env
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if !e.SameProcessGroup {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	} else {
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	}
	// After SIGTERM, Wait gives the plugin this long before it kills it
	// and stops waiting for pipes held open by its children.
	cmd.WaitDelay = grace

	start := cmd.Start
	if e.HostNetNS != "" {
		// The plugin is forked from a thread inside HostNetNS and so
		// starts there; this process stays where it is.
		start = func() error { return netns.Do(e.HostNetNS, cmd.Start) }
	}
	if err := start(); err != nil {
		if errors.Is(err, syscall.ETXTBSY) {
			return nil, err
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil, runtimeErrorf(CodePluginNotFound, "cannot start plugin %s: %v", path, err)
		}
		return nil, Errorf(CodeIOFailure, "cannot start plugin %s: %v", path, err)
	}
	waitErr := cmd.Wait()
	if ctx.Err() != nil {
		// Whatever survived SIGTERM and the leader's SIGKILL goes now: no
		// process of a timed-out plugin outlives the call.
		if !e.SameProcessGroup {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		return nil, runtimeErrorf(CodeTimeout, "plugin %s did not finish: %v", path, context.Cause(ctx)).WithDetails(stderrDetails(&stderr))
	}
	if waitErr == nil {
		return stdout.Bytes(), nil
	}
	var exitErr *exec.ExitError
	if !errors.As(waitErr, &exitErr) && !errors.Is(waitErr, exec.ErrWaitDelay) {
		return nil, runtimeErrorf(CodePluginCrashed, "plugin %s: %v", path, waitErr).WithDetails(stderrDetails(&stderr))
	}
	if errors.Is(waitErr, exec.ErrWaitDelay) && cmd.ProcessState.Success() {
		// The plugin succeeded but left a child holding its output open.
		return stdout.Bytes(), nil
	}
	return nil, pluginFailure(path, cmd.ProcessState, stdout.Bytes(), &stderr)
}

// pluginFailure turns a failed plugin's output into an error: its CNI
// error when stdout holds one, otherwise its exit status and stderr.
func pluginFailure(path string, state *os.ProcessState, stdout []byte, stderr *bytes.Buffer) error {
	if e, ok := parseErrorDoc(stdout); ok {
		return e
	}
	status := state.String()
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		status = "killed by signal " + ws.Signal().String()
	}
	msg := fmt.Sprintf("plugin %s failed (%s) without a CNI error", filepath.Base(path), status)
	if out := strings.TrimSpace(string(stdout)); out != "" {
		msg += "; stdout: " + abbreviate([]byte(out))
	}
	return runtimeErrorf(CodePluginCrashed, "%s", msg).WithDetails(stderrDetails(stderr))
}

// parseErrorDoc reads the specification's error document.
func parseErrorDoc(out []byte) (*Error, bool) {
	out = bytes.TrimSpace(out)
	if len(out) == 0 || out[0] != '{' {
		return nil, false
	}
	var doc struct {
		Code    *Code  `json:"code"`
		Msg     string `json:"msg"`
		Details string `json:"details"`
	}
	if err := json.Unmarshal(out, &doc); err != nil || doc.Code == nil {
		return nil, false
	}
	return &Error{Code: *doc.Code, Msg: doc.Msg, Details: doc.Details}, true
}

func stderrDetails(b *bytes.Buffer) string {
	s := strings.TrimSpace(b.String())
	const max = 4096
	if len(s) > max {
		s = "..." + s[len(s)-max:]
	}
	if s == "" {
		return ""
	}
	return "stderr: " + s
}

// FindInPath implements Exec.
func (e *RawExec) FindInPath(plugin string, dirs []string) (string, error) {
	return FindInPath(plugin, dirs)
}

// FindInPath returns the first executable regular file called plugin in
// dirs. A name with a path separator is refused rather than resolved, so
// a config cannot point the runtime at a binary outside the plugin dirs.
func FindInPath(plugin string, dirs []string) (string, error) {
	if plugin == "" {
		return "", Errorf(CodeInvalidNetworkConfig, "plugin type is empty")
	}
	if err := validatePluginType(plugin); err != nil {
		return "", Errorf(CodeInvalidNetworkConfig, "plugin type %v", err)
	}
	if len(dirs) == 0 {
		return "", runtimeErrorf(CodePluginNotFound, "plugin %q: no plugin directories given (CNI_PATH is empty)", plugin)
	}
	var notExec []string
	for _, dir := range dirs {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, plugin)
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		if !fi.Mode().IsRegular() {
			notExec = append(notExec, p+" (not a regular file)")
			continue
		}
		if fi.Mode().Perm()&0o111 == 0 {
			notExec = append(notExec, p+" (not executable)")
			continue
		}
		return p, nil
	}
	if len(notExec) > 0 {
		return "", runtimeErrorf(CodePluginNotFound, "plugin %q found but unusable: %s", plugin, strings.Join(notExec, ", "))
	}
	return "", runtimeErrorf(CodePluginNotFound, "plugin %q not found in %s", plugin, strings.Join(dirs, ":"))
}
