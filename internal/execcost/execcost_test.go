package execcost

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/podnet/podnet/internal/testutil"
)

// build compiles pkg (a path from the module root) with cgo on or off.
func build(b *testing.B, pkg string, cgo bool) string {
	b.Helper()
	root, err := testutil.ModuleRoot()
	if err != nil {
		b.Fatal(err)
	}
	out := filepath.Join(b.TempDir(), "bin")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if cgo {
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	}
	if msg, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("go build %s: %v\n%s", pkg, err, msg)
	}
	return out
}

// runEach execs bin once per iteration, as a runtime execs a plugin
// (VERSION: no namespace and no work).
func runEach(b *testing.B, bin string) {
	for b.Loop() {
		cmd := exec.Command(bin)
		cmd.Env = []string{"CNI_COMMAND=VERSION"}
		cmd.Stdin = nil
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPluginExec: a plugin exec'd for VERSION, linked statically
// (as make build and the image build it) and dynamically (the default
// with cgo, which package net pulls in).
func BenchmarkPluginExec(b *testing.B) {
	for _, p := range []string{"./plugins/loopback", "./plugins/podnet"} {
		for _, c := range []struct {
			name string
			cgo  bool
		}{{"static", false}, {"dynamic", true}} {
			b.Run(filepath.Base(p)+"/"+c.name, func(b *testing.B) { runEach(b, build(b, p, c.cgo)) })
		}
	}
}

// BenchmarkStoreClientExec: the process cost of linking each store
// client into a short-lived binary, all static: the full etcd client,
// the gateway plugins use, the Kubernetes store and the agent's socket
// (docs/design/kubernetes-ipam.md 4.4 item 1).
func BenchmarkStoreClientExec(b *testing.B) {
	for _, name := range []string{"etcdclient", "etcdgw", "kube", "agent"} {
		b.Run(name, func(b *testing.B) { runEach(b, build(b, "./internal/execcost/testdata/"+name, false)) })
	}
}
