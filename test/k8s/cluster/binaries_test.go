package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestBuildStamp checks when a cached build is rebuilt: a wrapper without
// Go source (kbuild, cbuild-*) keeps the stamp of go.mod, go.sum and the
// toolchain that its cache already has, and a wrapper with source
// (dnsbuild) gets another stamp whenever that source changes.
func TestBuildStamp(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, data string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stamp := func() string {
		t.Helper()
		s, err := buildStamp(goTool, dir, "")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	write("go.mod", "module example.com/wrapper\n")
	write("go.sum", "example.com/x v1.0.0 h1:x=\n")

	goVer, err := exec.Command(goTool, "env", "GOVERSION").Output()
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	h.Write([]byte("module example.com/wrapper\nexample.com/x v1.0.0 h1:x=\n"))
	fmt.Fprintf(h, "%s %s/%s", strings.TrimSpace(string(goVer)), runtime.GOOS, runtime.GOARCH)
	if got, want := stamp(), hex.EncodeToString(h.Sum(nil)); got != want {
		t.Errorf("a wrapper without source: stamp %s, want %s (go.mod, go.sum and the toolchain alone)", got, want)
	}

	seen := map[string]string{stamp(): "no source"}
	for _, step := range []struct{ what, name, data string }{
		{"a main package", "cmd/main.go", "package main\n"},
		{"an edit to it", "cmd/main.go", "package main\n\nimport _ \"example.com/x/plugin\"\n"},
		{"a second file", "cmd/other.go", "package main\n"},
	} {
		write(step.name, step.data)
		s := stamp()
		if prev, ok := seen[s]; ok {
			t.Errorf("after %s: the stamp of %s", step.what, prev)
		}
		seen[s] = step.what
	}
	write("cmd/README", "not Go")
	if s := stamp(); seen[s] != "a second file" {
		t.Errorf("a file other than Go source changed the stamp")
	}
}
