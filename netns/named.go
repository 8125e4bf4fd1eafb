package netns

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// RunDir is where named network namespaces live, as with `ip netns`.
const RunDir = "/run/netns"

// runDir guards the one-time preparation of RunDir within this process;
// a lock on the directory itself covers other processes.
var runDir struct {
	sync.Mutex
	ready bool
}

// NamedPath is the path of the named namespace name.
func NamedPath(name string) string { return filepath.Join(RunDir, name) }

func validName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("netns: invalid namespace name %q", name)
	}
	return nil
}

// NewNamed creates a network namespace that persists without any process
// in it, bind-mounted at /run/netns/<name> as `ip netns add` does, and
// returns its path. It fails with an error wrapping fs.ErrExist when the
// name is taken. The caller's thread never changes namespace.
func NewNamed(name string) (string, error) {
	if err := validName(name); err != nil {
		return "", err
	}
	if err := prepareRunDir(); err != nil {
		return "", err
	}
	path := NamedPath(name)
	// O_EXCL: two creators of one name must not share a namespace.
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o444)
	if err != nil {
		return "", fmt.Errorf("netns: create %s: %w", path, err)
	}
	f.Close()

	mounted := false
	err = onFreshThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("netns: unshare: %w", err)
		}
		// thread-self: the new namespace belongs to this thread only.
		if err := unix.Mount(threadSelfNS, path, "none", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("netns: bind mount onto %s: %w", path, err)
		}
		mounted = true
		return nil
	})
	if err != nil {
		if mounted {
			_ = unix.Unmount(path, unix.MNT_DETACH)
		}
		_ = os.Remove(path)
		return "", err
	}
	return path, nil
}

// prepareRunDir makes RunDir a mount point with shared propagation, as
// iproute2 does, so that a namespace mounted there later is also visible
// in mount namespaces that were copied from this one before it existed.
func prepareRunDir() error {
	runDir.Lock()
	defer runDir.Unlock()
	if runDir.ready {
		return nil
	}
	if err := os.MkdirAll(RunDir, 0o755); err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	d, err := os.Open(RunDir)
	if err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	defer d.Close() // releases the flock
	// Without the lock, two processes could both find RunDir not a mount
	// point and stack two bind mounts on it.
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("netns: lock %s: %w", RunDir, err)
	}
	for made := false; ; made = true {
		err := unix.Mount("", RunDir, "none", unix.MS_SHARED|unix.MS_REC, "")
		if err == nil {
			runDir.ready = true
			return nil
		}
		// EINVAL: RunDir is not a mount point yet; make it one, once.
		if !errors.Is(err, unix.EINVAL) || made {
			return fmt.Errorf("netns: make %s a shared mount: %w", RunDir, err)
		}
		if err := unix.Mount(RunDir, RunDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("netns: bind mount %s onto itself: %w", RunDir, err)
		}
	}
}

// DeleteNamed removes the named namespace: its bind mount (lazily, so a
// process still using it keeps it until it lets go) and its file. A name
// that does not exist is not an error, so DeleteNamed may be repeated.
func DeleteNamed(name string) error {
	if err := validName(name); err != nil {
		return err
	}
	path := NamedPath(name)
	// Loop: a file bind-mounted twice needs two unmounts. EINVAL means it
	// is no longer a mount point.
	for i := 0; ; i++ {
		err := unix.Unmount(path, unix.MNT_DETACH)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			break
		}
		if err != nil {
			return fmt.Errorf("netns: unmount %s: %w", path, err)
		}
		if i == 16 {
			return fmt.Errorf("netns: %s is still mounted after %d unmounts", path, i+1)
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("netns: remove %s: %w", path, err)
	}
	return nil
}
