package testutil

import (
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/podnet/podnet/netns"
)

// NetNSPrefix starts the name of every namespace NewNetNS creates, so a
// leftover one (a test binary killed mid-run) is easy to recognise.
const NetNSPrefix = "pntest-"

// NewNetNS creates a named network namespace for t and removes it when t
// ends, whether or not t failed. It needs root; call RequireRoot first.
func NewNetNS(t testing.TB) (name, path string) {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("random netns name: %v", err)
	}
	name = NetNSPrefix + hex.EncodeToString(b[:])
	path, err := netns.NewNamed(name)
	if err != nil {
		t.Fatalf("create netns %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("remove netns %s: %v", name, err)
		}
	})
	return name, path
}
