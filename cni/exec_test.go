package cni

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podnet/podnet/internal/testutil"
)

// script writes an executable shell-script plugin into dir.
func script(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRawExecOutcomes(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, body string
		code       Code
		want       []string
	}{
		{"cni error", `echo '{"cniVersion":"1.0.0","code":7,"msg":"bad subnet","details":"10.0.0.0/33"}'; exit 1`, CodeInvalidNetworkConfig, []string{"bad subnet", "10.0.0.0/33"}},
		{"crash with stderr", `echo "panic: nil map" >&2; exit 2`, CodePluginCrashed, []string{"exit status 2", "without a CNI error", "stderr: panic: nil map"}},
		{"garbage on failure", `echo "oops"; exit 1`, CodePluginCrashed, []string{`stdout: "oops"`}},
		{"killed", `kill -9 $$`, CodePluginCrashed, []string{"killed by signal killed"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := script(t, dir, strings.ReplaceAll(tc.name, " ", "-"), tc.body)
			_, err := (&RawExec{}).ExecPlugin(context.Background(), p, nil, nil)
			if CodeOf(err) != tc.code {
				t.Fatalf("code %d, want %d: %v", CodeOf(err), tc.code, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestRawExecPassesStdinAndEnv(t *testing.T) {
	p := script(t, t.TempDir(), "echo", `cat; echo " $CNI_COMMAND"`)
	out, err := (&RawExec{}).ExecPlugin(context.Background(), p, []byte(`{"a":1}`), []string{"CNI_COMMAND=ADD"})
	if err != nil || string(out) != "{\"a\":1} ADD\n" {
		t.Fatalf("out %q err %v", out, err)
	}
}

func TestRawExecTimeoutKillsProcessGroup(t *testing.T) {
	for _, tc := range []struct{ name, trap string }{
		{"obeys SIGTERM", ""},
		{"ignores SIGTERM", "trap '' TERM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			pidFile := filepath.Join(dir, "child.pid")
			// The plugin starts a child that would outlive it, then hangs.
			p := script(t, dir, "hang", tc.trap+"\nsleep 300 & echo $! > "+pidFile+"\necho $$ >> "+pidFile+"\nwait")
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := (&RawExec{KillGrace: 200 * time.Millisecond}).ExecPlugin(ctx, p, nil, nil)
			if CodeOf(err) != CodeTimeout {
				t.Fatalf("code %d: %v", CodeOf(err), err)
			}
			// Without the kill the plugin would run for 300 s; the bound only
			// proves the kill happened, with room for a loaded machine.
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("timeout took %v", d)
			}
			b, rerr := os.ReadFile(pidFile)
			if rerr != nil {
				t.Fatal(rerr)
			}
			for _, f := range strings.Fields(string(b)) {
				pid, _ := strconv.Atoi(f)
				testutil.WaitProcessGone(t, pid, 5*time.Second)
			}
		})
	}
}

func TestRawExecRetriesTextFileBusy(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "busy")
	// Hold the binary open for writing, as an installer replacing it
	// does: exec fails with ETXTBSY until it is closed.
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("#!/bin/sh\necho ok\n"); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(60 * time.Millisecond)
		f.Close()
	}()
	out, err := (&RawExec{}).ExecPlugin(context.Background(), p, nil, nil)
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("out %q err %v", out, err)
	}
}

func TestFindInPath(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	script(t, b, "good", "true")
	if err := os.WriteFile(filepath.Join(a, "noexec"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(a, "adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	script(t, b, "shadowed", "true")
	script(t, a, "shadowed", "true")
	tests := []struct {
		plugin string
		dirs   []string
		want   string
		code   Code
	}{
		{"good", []string{a, b}, filepath.Join(b, "good"), 0},
		{"shadowed", []string{a, b}, filepath.Join(a, "shadowed"), 0},
		{"noexec", []string{a}, "", CodePluginNotFound},
		{"adir", []string{a}, "", CodePluginNotFound},
		{"nothere", []string{a, b}, "", CodePluginNotFound},
		{"good", nil, "", CodePluginNotFound},
		{"../good", []string{a}, "", CodeInvalidNetworkConfig},
		{"", []string{a}, "", CodeInvalidNetworkConfig},
	}
	for _, tc := range tests {
		got, err := FindInPath(tc.plugin, tc.dirs)
		if got != tc.want || CodeOf(err) != tc.code {
			t.Errorf("FindInPath(%q) = %q, %v; want %q code %d", tc.plugin, got, err, tc.want, tc.code)
		}
	}
	_, err := FindInPath("noexec", []string{a})
	if !strings.Contains(err.Error(), "not executable") {
		t.Errorf("message does not say why: %v", err)
	}
}

func TestRawExecInHostNetNS(t *testing.T) {
	testutil.RequireRoot(t)
	_, nsPath := testutil.NewNetNS(t)
	p := script(t, t.TempDir(), "where", `readlink /proc/self/ns/net`)
	out, err := (&RawExec{HostNetNS: nsPath}).ExecPlugin(context.Background(), p, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(nsPath, &st); err != nil {
		t.Fatal(err)
	}
	if want := "net:[" + strconv.FormatUint(st.Ino, 10) + "]"; strings.TrimSpace(string(out)) != want {
		t.Errorf("plugin ran in %s, want %s", out, want)
	}
	self, _ := os.Readlink("/proc/self/ns/net")
	if strings.TrimSpace(string(out)) == self {
		t.Error("plugin ran in the caller's namespace")
	}
}

func TestRawExecSameProcessGroup(t *testing.T) {
	dir := t.TempDir()
	// Field 5 of /proc/<pid>/stat is the process group.
	p := script(t, dir, "pgid", `cut -d' ' -f5 /proc/$$/stat`)
	for _, same := range []bool{false, true} {
		out, err := (&RawExec{SameProcessGroup: same}).ExecPlugin(context.Background(), p, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		pgid, _ := strconv.Atoi(strings.TrimSpace(string(out)))
		if (pgid == syscall.Getpgrp()) != same {
			t.Errorf("SameProcessGroup=%v: plugin in group %d, caller in %d", same, pgid, syscall.Getpgrp())
		}
	}
	// A delegate that hangs is ended on the deadline, and only it.
	hang := script(t, dir, "hang", "echo $$ > "+filepath.Join(dir, "pid")+"; exec sleep 300")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := (&RawExec{SameProcessGroup: true, KillGrace: 200 * time.Millisecond}).ExecPlugin(ctx, hang, nil, nil)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("hanging delegate: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "pid"))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	testutil.WaitProcessGone(t, pid, 5*time.Second)
}
