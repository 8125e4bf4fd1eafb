package skel

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

// TestRealNetNSChecks runs Run, with the real namespace checks, against
// real namespaces and things that are not.
func TestRealNetNSChecks(t *testing.T) {
	testutil.RequireRoot(t)
	_, nsPath := testutil.NewNetNS(t)
	goneName, gonePath := testutil.NewNetNS(t)
	if err := netns.DeleteNamed(goneName); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing")

	tests := []struct {
		cmd, netns string
		wantCode   cni.Code // 0: success
		wantGone   bool
	}{
		{"ADD", nsPath, 0, false},
		{"CHECK", nsPath, 0, false},
		{"DEL", nsPath, 0, false},
		{"ADD", "/proc/self/ns/net", cni.CodeInvalidEnvironment, false},
		{"ADD", "/proc/thread-self/ns/net", cni.CodeInvalidEnvironment, false},
		{"DEL", "/proc/self/ns/net", cni.CodeInvalidEnvironment, false},
		{"ADD", "/proc/self/ns/mnt", cni.CodeInvalidEnvironment, false},
		{"ADD", file, cni.CodeInvalidEnvironment, false},
		{"ADD", missing, cni.CodeUnknownContainer, false},
		{"CHECK", gonePath, cni.CodeUnknownContainer, false},
		{"DEL", missing, 0, true},
		{"DEL", gonePath, 0, true},
		{"DEL", file, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.cmd+" "+tt.netns, func(t *testing.T) {
			var called *CmdArgs
			h := func(a *CmdArgs) error { called = a; return nil }
			p := &Plugin{
				Add:   func(a *CmdArgs) (*cni.Result, error) { called = a; return &cni.Result{CNIVersion: "1.1.0"}, nil },
				Del:   h,
				Check: h,
			}
			env := with(baseEnv(tt.cmd), "CNI_NETNS", tt.netns)
			var stdout, stderr bytes.Buffer
			status := p.Run(func(k string) string { return env[k] }, strings.NewReader(conf11), &stdout, &stderr)
			if tt.wantCode == 0 {
				if status != 0 || called == nil {
					t.Fatalf("status %d, called %v: %s", status, called != nil, stdout.String())
				}
				if called.NetnsGone != tt.wantGone {
					t.Errorf("NetnsGone = %v, want %v", called.NetnsGone, tt.wantGone)
				}
				return
			}
			var e cni.Error
			if status != 1 || called != nil || json.Unmarshal(stdout.Bytes(), &e) != nil || e.Code != tt.wantCode {
				t.Fatalf("status %d, called %v, stdout %s; want code %d and no handler call", status, called != nil, stdout.String(), tt.wantCode)
			}
			if !strings.Contains(e.Msg, tt.netns) {
				t.Errorf("error %q does not name %s", e.Msg, tt.netns)
			}
		})
	}
}

// TestMainGuardsStdout runs Main in a child process whose handler
// prints on stdout: the print must land on stderr, and stdout must hold
// the result alone.
func TestMainGuardsStdout(t *testing.T) {
	if os.Getenv("PODNET_SKEL_TEST_MAIN") == "1" {
		p := &Plugin{Add: func(*CmdArgs) (*cni.Result, error) {
			os.Stdout.WriteString("stray print\n")
			return &cni.Result{CNIVersion: "1.1.0", Interfaces: []*cni.Interface{{Name: "eth0"}}}, nil
		}}
		p.Main()
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestMainGuardsStdout$")
	cmd.Env = []string{"PODNET_SKEL_TEST_MAIN=1", "CNI_COMMAND=ADD", "CNI_CONTAINERID=c1", "CNI_NETNS=/run/netns/x", "CNI_IFNAME=eth0", "CNI_PATH=/x"}
	// Without root there is no namespace to give ADD, so it fails before
	// the handler; the error document must then be alone on stdout.
	if os.Geteuid() == 0 {
		_, path := testutil.NewNetNS(t)
		cmd.Env = append(cmd.Env, "CNI_NETNS="+path)
	}
	cmd.Stdin = strings.NewReader(conf11)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	out := stdout.String()
	if strings.Contains(out, "stray") {
		t.Fatalf("a handler's print reached stdout: %q", out)
	}
	if os.Geteuid() != 0 {
		if _, err := cni.ParseResult(stdout.Bytes()); err == nil || runErr == nil {
			t.Fatalf("expected an error document, got %q (%v)", out, runErr)
		}
		return
	}
	if runErr != nil {
		t.Fatalf("plugin failed: %v; stdout %q; stderr %q", runErr, out, stderr.String())
	}
	if _, err := cni.ParseResult(stdout.Bytes()); err != nil {
		t.Fatalf("stdout %q: %v", out, err)
	}
	if !strings.Contains(stderr.String(), "stray print") {
		t.Errorf("the stray print should be on stderr, got %q", stderr.String())
	}
}
