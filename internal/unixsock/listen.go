// Package unixsock makes the node's unix sockets between the agent and
// the plugins (the IPAM store's, the policy handshake's): created 0600
// and renamed into place, so that no client finds one half made or
// readable by others, and removed on close only while still the
// listener's own.
package unixsock

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
)

// Listen creates the unix socket at path, mode 0600, replacing a stale
// one. The socket is bound under a temporary name, made 0600 and renamed
// into place. Closing the listener removes path, unless another server
// has replaced the socket since. Errors name path.
func Listen(path string) (net.Listener, error) {
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, err
	}
	tmp := filepath.Join(filepath.Dir(path), fmt.Sprintf(".%s.%d.%s", filepath.Base(path), os.Getpid(), hex.EncodeToString(rnd[:])))
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	// The listener would unlink the temporary name on Close; path is
	// removed below instead.
	l.SetUnlinkOnClose(false)
	fail := func(err error) (net.Listener, error) {
		l.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fail(err)
	}
	return &listener{UnixListener: l, path: path, ino: fi.Sys().(*syscall.Stat_t).Ino}, nil
}

// listener removes its socket file on Close if the file is still its.
type listener struct {
	*net.UnixListener
	path string
	ino  uint64
}

func (l *listener) Close() error {
	err := l.UnixListener.Close()
	if fi, serr := os.Stat(l.path); serr == nil && fi.Sys().(*syscall.Stat_t).Ino == l.ino {
		os.Remove(l.path)
	}
	return err
}
