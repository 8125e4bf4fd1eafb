package version

import (
	"strings"
	"testing"
)

func TestGet(t *testing.T) {
	in := Get()
	if in.Version == "" || in.GoVersion == "" || in.Platform == "" {
		t.Fatalf("Get() = %+v: a field is empty", in)
	}
	old := version
	t.Cleanup(func() { version = old })
	version = "1.2.3"
	if got := Get().Version; got != "1.2.3" {
		t.Fatalf("with the linker's version set, Version = %q", got)
	}
}

func TestString(t *testing.T) {
	in := Info{Version: "0.1.0", Revision: "0123456789abcdef", GoVersion: "go1.26.6", Platform: "linux/amd64"}
	if got, want := in.String(), "0.1.0 (0123456789ab, go1.26.6 linux/amd64)"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	in.Revision = ""
	if got := in.String(); strings.Contains(got, ", go") {
		t.Fatalf("String() without a revision = %q", got)
	}
}
