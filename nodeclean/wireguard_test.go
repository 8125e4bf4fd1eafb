package nodeclean

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestRemoveWireGuardSocket: podnet.wg's UAPI socket that a killed agent
// left is removed; one an agent still serves, and the other tools'
// sockets and the directory, stay.
func TestRemoveWireGuardSocket(t *testing.T) {
	n := newNode(t)
	n.paths.WireGuardDir = filepath.Join(t.TempDir(), "wireguard")
	if err := os.Mkdir(n.paths.WireGuardDir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(n.paths.WireGuardDir, "podnet.wg.sock")
	other := filepath.Join(n.paths.WireGuardDir, "wg0.sock")
	listen := func(p string) *net.UnixListener {
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		l.SetUnlinkOnClose(false)
		return l
	}
	defer listen(other).Close() // another tool's device, live
	live := listen(sock)

	var r Report
	n.do(t, func() (err error) { r, err = Remove(n.paths, false); return err })
	if !slices.ContainsFunc(r.Kept, func(k Kept) bool { return k.Target == sock }) || slices.ContainsFunc(r.Steps, func(s Step) bool { return s.Target == sock }) {
		t.Errorf("a socket an agent serves: steps %v, kept %+v; want it kept", r.Steps, r.Kept)
	}
	live.Close() // as the agent's kill -9 leaves it: the file, no listener
	if _, err := os.Stat(sock); err != nil {
		t.Fatal(err)
	}

	n.do(t, func() (err error) { r, err = Verify(n.paths); return err })
	if r.Clean() {
		t.Errorf("verify: clean with %s left", sock)
	}
	n.do(t, func() (err error) { r, err = Remove(n.paths, false); return err })
	if !slices.ContainsFunc(r.Steps, func(s Step) bool { return s.Kind == KindRun && s.Target == sock }) || len(r.Errors) > 0 {
		t.Errorf("steps %v, errors %v; want %s removed", r.Steps, r.Errors, sock)
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("%s: %v, want it gone", sock, err)
	}
	if _, err := os.Lstat(other); err != nil {
		t.Errorf("another tool's socket: %v", err)
	}
	n.do(t, func() (err error) { r, err = Verify(n.paths); return err })
	if !r.Clean() {
		t.Errorf("verify after removal: %v", r.Steps)
	}
}
