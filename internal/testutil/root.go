package testutil

import (
	"os"
	"testing"
)

// RequireRoot skips t when the process is not root. When the CI
// environment variable is set it fails instead: a root test that skips
// in CI is a test that silently never runs.
func RequireRoot(t testing.TB) {
	t.Helper()
	requireRoot(t, os.Geteuid(), os.Getenv("CI"))
}

// gate is the part of testing.TB that requireRoot uses, so that its
// test can observe a Skip or a Fatal without being skipped or failed.
type gate interface {
	Helper()
	Skip(args ...any)
	Fatalf(format string, args ...any)
}

func requireRoot(t gate, euid int, ci string) {
	t.Helper()
	if euid == 0 {
		return
	}
	if ci != "" {
		t.Fatalf("test needs root, and CI is set: run the tests as root in CI")
		return
	}
	t.Skip("test needs root")
}
