package main

import (
	"strings"
	"testing"
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
