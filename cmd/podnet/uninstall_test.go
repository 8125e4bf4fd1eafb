package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

// podnet uninstall has the flags the uninstall DaemonSet passes, with the
// host's paths as defaults, and refuses what cannot go together before
// it looks at the node.
func TestUninstallFlags(t *testing.T) {
	root := newRootCommand()
	cmd, _, err := root.Find([]string{"uninstall"})
	if err != nil {
		t.Fatal(err)
	}
	for flag, def := range map[string]string{"conf-dir": "/etc/cni/net.d", "bin-dir": "/opt/cni/bin", "state-dir": "/var/lib/podnet",
		"run-dir": "/run/podnet", "dry-run": "false", "datastore": "", "ipam": "node-cidr", "kubeconfig": "", "verify": "false", "hold": "false", "output": "text"} {
		f := cmd.Flags().Lookup(flag)
		if f == nil || f.DefValue != def {
			t.Errorf("--%s: %+v, want default %q", flag, f, def)
		}
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"uninstall", "--verify", "--hold"}, "--verify"},
		{[]string{"uninstall", "-o", "yaml"}, "--output"},
		{[]string{"uninstall", "--run-dir", "/run"}, "--run-dir /run"},
		{[]string{"uninstall", "--conf-dir", "rel"}, "--conf-dir"},
		{[]string{"uninstall", "--ipam", "blocks"}, "--datastore kubernetes"},
		{[]string{"uninstall", "--datastore", "etcd"}, "--datastore"},
		{[]string{"uninstall", "--datastore", "kubernetes", "--ipam", "model-c"}, "--ipam"},
	} {
		root := newRootCommand()
		root.SetArgs(tt.args)
		if err := root.Execute(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want an error naming %s", tt.args, err, tt.want)
		}
	}
}

// TestUninstallVerifyExitCode runs podnet uninstall in a node's
// namespace on directories holding podnet's config and another CNI's:
// --verify exits 1 naming what is left, the removal takes podnet's
// only, and --verify then exits 0; --dry-run changes nothing.
func TestUninstallVerifyExitCode(t *testing.T) {
	testutil.RequireRoot(t)
	_, ns := testutil.NewNodeNetNS(t)
	base := t.TempDir()
	dirs := map[string]string{}
	for _, d := range []string{"conf-dir", "bin-dir", "state-dir", "run-dir"} {
		dirs[d] = filepath.Join(base, d)
		if err := os.MkdirAll(dirs[d], 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		filepath.Join(dirs["conf-dir"], "10-podnet.conflist"): `{"cniVersion":"1.0.0","name":"podnet","plugins":[{"type":"podnet"}]}`,
		filepath.Join(dirs["conf-dir"], "20-other.conflist"):  `{"cniVersion":"1.0.0","name":"other","plugins":[{"type":"bridge"}]}`,
		filepath.Join(dirs["state-dir"], "ipam.db"):           "x",
	}
	for p, body := range files {
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(extra ...string) (string, error) {
		args := []string{"uninstall"}
		for flag, d := range dirs {
			args = append(args, "--"+flag+"="+d)
		}
		root := newRootCommand()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs(append(args, extra...))
		err := netns.Do(ns, func() error { return root.ExecuteContext(context.Background()) })
		return out.String(), err
	}
	for _, step := range []struct {
		args     []string
		wantCode int
		want     string
	}{
		{[]string{"--dry-run"}, 0, "would remove: config " + filepath.Join(dirs["conf-dir"], "10-podnet.conflist")},
		{[]string{"--verify"}, 1, "left: state " + filepath.Join(dirs["state-dir"], "ipam.db")},
		{nil, 0, "kept: config " + filepath.Join(dirs["conf-dir"], "20-other.conflist")},
		{[]string{"--verify"}, 0, "clean: nothing of podnet is left"},
		{nil, 0, "nothing of podnet found"},
	} {
		out, err := run(step.args...)
		var code exitCode
		if err != nil && !errors.As(err, &code) {
			t.Fatalf("%v: %v", step.args, err)
		}
		if int(code) != step.wantCode || !strings.Contains(out, step.want) {
			t.Errorf("%v: exit %d, output:\n%s\nwant exit %d and %q", step.args, code, out, step.wantCode, step.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dirs["conf-dir"], "20-other.conflist")); err != nil {
		t.Errorf("the other CNI's config: %v", err)
	}
}
