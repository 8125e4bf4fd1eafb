package agentstatus

import "testing"

// TestBuild: a test binary has build information, so a version (the
// main module's, "(devel)" or a tag) is always said.
func TestBuild(t *testing.T) {
	if v, _ := Build(); v == "" {
		t.Error("no version")
	}
}
