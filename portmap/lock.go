package portmap

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// DefaultLockPath is the file whose flock serialises podnet-portmap
// invocations on a host.
const DefaultLockPath = "/run/podnet/portmap.lock"

// lock takes an exclusive flock on path, creating it. Reconcile reads
// the table and decides from what it saw; two ADDs for one port must not
// both decide from a table without the other's element, and two first
// ADDs must not both set the table up. The kernel releases the lock if
// the process dies.
func lock(path string) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("portmap: lock directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("portmap: open lock: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("portmap: lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
