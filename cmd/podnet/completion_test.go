package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/podnet/podnet/sandbox"
)

// complete runs cobra's hidden __complete command through the root
// command, as the shell scripts do, and returns the candidates (without
// their descriptions) and the directive line.
func complete(t *testing.T, args ...string) (candidates []string, directive string) {
	t.Helper()
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&bytes.Buffer{})
	root.SetArgs(append([]string{"__complete"}, args...))
	if err := root.Execute(); err != nil {
		t.Fatalf("__complete %v: %v", args, err)
	}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if strings.HasPrefix(line, ":") {
			directive = line
			continue
		}
		name, _, _ := strings.Cut(line, "\t")
		candidates = append(candidates, name)
	}
	return candidates, directive
}

// TestCompletion: the completions that come from the node (networks of
// the conf dir, podnet's sandboxes, /run/netns) and the flags' words.
func TestCompletion(t *testing.T) {
	confDir, stateDir, nsDir := t.TempDir(), t.TempDir(), t.TempDir()
	for name, doc := range map[string]string{
		"10-alpha.conflist": `{"cniVersion":"1.1.0","name":"alpha","plugins":[{"type":"podnet"}]}`,
		"20-beta.conflist":  `{"cniVersion":"1.0.0","name":"beta","plugins":[{"type":"bridge"}]}`,
		"30-broken.conf":    `{`,
	} {
		if err := os.WriteFile(filepath.Join(confDir, name), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	st := sandbox.NewStore(stateDir)
	for _, name := range []string{"web", "db"} {
		if err := st.Save(&sandbox.Sandbox{Name: name, Namespace: "default", NetNS: filepath.Join(nsDir, "podnet-"+name), Created: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(nsDir, "podnet-web"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	old := netnsDir
	netnsDir = nsDir
	t.Cleanup(func() { netnsDir = old })
	dirs := []string{"--conf-dir", confDir, "--state-dir", stateDir}
	tests := []struct {
		args []string
		want []string
	}{
		{append([]string{"pod", "add"}, append(dirs, "")...), []string{"alpha", "beta"}},
		{append([]string{"pod", "del"}, append(dirs, "alpha", "")...), []string{"podnet-web", filepath.Join(nsDir, "podnet-db")}},
		{append([]string{"pod", "rm"}, append(dirs, "")...), []string{"db", "web"}},
		{append([]string{"pod", "rm"}, append(dirs, "web", "")...), []string{"db"}},
		{append([]string{"pod", "gc"}, append(dirs, "")...), []string{"alpha", "beta"}},
		{append([]string{"pod", "gc"}, append(dirs, "alpha", "")...), nil},
		{append([]string{"net", "validate"}, append(dirs, "beta", "")...), []string{"alpha"}},
		{append([]string{"run"}, append(dirs, "--network", "")...), []string{"alpha", "beta"}},
		{[]string{"net", "ls", "-o", ""}, []string{"table", "json"}},
		{[]string{"status", "-o", ""}, []string{"text", "json"}},
		{[]string{"ipam", "check", "--output", ""}, []string{"table", "json"}},
		{[]string{"agent", "--mode", ""}, []string{"host-gw", "vxlan", "auto"}},
		{[]string{"policy", "explain", "--protocol", ""}, []string{"TCP", "UDP", "SCTP"}},
		{[]string{"status", "--log-level", ""}, []string{"debug", "info", "warn", "error"}},
		{[]string{"completion", ""}, []string{"bash", "fish", "powershell", "zsh"}},
		{[]string{"flows", "--verdict", ""}, []string{"forwarded", "dropped-policy", "dropped-guard", "dropped"}},
		{[]string{"flows", "--protocol", ""}, []string{"tcp", "udp", "sctp", "icmp", "icmpv6"}},
		{[]string{"flows", "-o", ""}, []string{"text", "json"}},
	}
	for _, tt := range tests {
		got, directive := complete(t, tt.args...)
		if !slices.Equal(got, tt.want) {
			t.Errorf("complete %q: %q (%s), want %q", tt.args, got, directive, tt.want)
		}
	}
}

// TestCompletionCommand: cobra's completion command is there for the
// four shells, prints a script, and its help says how to install it.
func TestCompletionCommand(t *testing.T) {
	for shell, want := range map[string]string{"bash": "__start_podnet", "zsh": "#compdef podnet", "fish": "complete -c podnet", "powershell": "Register-ArgumentCompleter"} {
		root := newRootCommand()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs([]string{"completion", shell})
		if err := root.Execute(); err != nil || !strings.Contains(out.String(), want) {
			t.Errorf("podnet completion %s: %v, script lacks %q", shell, err, want)
		}
		root = newRootCommand()
		out.Reset()
		root.SetOut(&out)
		root.SetArgs([]string{"completion", shell, "--help"})
		if err := root.Execute(); err != nil || !strings.Contains(out.String(), "To load completions") {
			t.Errorf("podnet completion %s --help: %v, says nothing of installing:\n%s", shell, err, out.String())
		}
	}
}
