package netns

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// ErrNotNetNS is wrapped by the errors for a path that exists but is not
// a network namespace. A path that does not exist gives an error that
// wraps fs.ErrNotExist instead, so callers can tell "gone" (DEL must
// succeed) from "wrong" (a caller bug).
var ErrNotNetNS = errors.New("not a network namespace")

// threadSelfNS names the network namespace of the calling OS thread.
// /proc/self/ns/net would name the main thread's, which is not the one a
// goroutine locked to another thread is in.
const threadSelfNS = "/proc/thread-self/ns/net"

// NetNS is an open handle on a network namespace. Holding it keeps the
// namespace alive even if its bind mount is removed. It is safe for
// concurrent use, except that Close must not race with other methods.
type NetNS struct {
	f    *os.File
	path string
}

// Open opens the network namespace at path (a bind-mounted file such as
// /run/netns/x, or /proc/<pid>/ns/net). It fails with an error wrapping
// fs.ErrNotExist when path does not exist and ErrNotNetNS when it is
// something else.
func Open(path string) (*NetNS, error) {
	if path == "" {
		return nil, fmt.Errorf("netns: empty path: %w", fs.ErrNotExist)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("netns: open %s: %w", path, err)
	}
	if err := checkNetNSFile(f, path); err != nil {
		f.Close()
		return nil, err
	}
	return &NetNS{f: f, path: path}, nil
}

// checkNetNSFile checks the open file rather than the path, so that the
// file that was checked is the file that is used.
func checkNetNSFile(f *os.File, path string) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("netns: %s: %w", path, err)
	}
	var checkErr error
	err = rc.Control(func(fd uintptr) {
		var st unix.Statfs_t
		if err := unix.Fstatfs(int(fd), &st); err != nil {
			checkErr = fmt.Errorf("netns: statfs %s: %w", path, err)
			return
		}
		// nsfs on current kernels; procfs on kernels before 3.19, where
		// namespace files lived in /proc.
		if st.Type != unix.NSFS_MAGIC && st.Type != unix.PROC_SUPER_MAGIC {
			checkErr = fmt.Errorf("netns: %s is %w (file system magic %#x)", path, ErrNotNetNS, st.Type)
			return
		}
		// The magic says "some namespace": ask which kind. Kernels before
		// 4.11 lack NS_GET_NSTYPE (ENOTTY); the magic is all they offer.
		t, err := unix.IoctlRetInt(int(fd), unix.NS_GET_NSTYPE)
		switch {
		case errors.Is(err, unix.ENOTTY):
		case err != nil:
			checkErr = fmt.Errorf("netns: %s is %w (%v)", path, ErrNotNetNS, err)
		case t != unix.CLONE_NEWNET:
			checkErr = fmt.Errorf("netns: %s is %w (it is a namespace of type %#x)", path, ErrNotNetNS, t)
		}
	})
	if err != nil {
		return fmt.Errorf("netns: %s: %w", path, err)
	}
	return checkErr
}

// IsNetNS returns nil when path is a network namespace, and otherwise an
// error naming path that wraps fs.ErrNotExist or ErrNotNetNS.
func IsNetNS(path string) error {
	n, err := Open(path)
	if err != nil {
		return err
	}
	return n.Close()
}

// Path is the path the namespace was opened from.
func (n *NetNS) Path() string { return n.path }

// Close releases the handle.
func (n *NetNS) Close() error { return n.f.Close() }

// Do runs fn inside the namespace on an OS thread locked for the
// duration; see the package documentation. Goroutines that fn starts do
// not run in the namespace, and fn must not call runtime.UnlockOSThread. A panic in fn is re-raised in the caller's
// goroutine as a *PanicError, after the thread has been switched back.
func (n *NetNS) Do(fn func() error) error {
	return onFreshThread(func() error {
		if err := n.set(); err != nil {
			return err
		}
		return fn()
	})
}

// set moves the calling thread into n. The Control callback holds a
// reference on the descriptor, so a concurrent Close cannot make setns
// use a recycled descriptor number.
func (n *NetNS) set() error {
	rc, err := n.f.SyscallConn()
	if err != nil {
		return fmt.Errorf("netns: enter %s: %w", n.path, err)
	}
	var setErr error
	if err := rc.Control(func(fd uintptr) { setErr = setns(int(fd), unix.CLONE_NEWNET) }); err != nil {
		return fmt.Errorf("netns: enter %s: %w", n.path, err)
	}
	if setErr != nil {
		return fmt.Errorf("netns: enter %s: %w", n.path, setErr)
	}
	return nil
}

// Do runs fn inside the network namespace at path; see NetNS.Do. It fails
// without running fn when path is not a network namespace.
func Do(path string, fn func() error) error {
	n, err := Open(path)
	if err != nil {
		return err
	}
	defer n.Close()
	return n.Do(fn)
}

// SameAsCurrent reports whether path is the network namespace of the
// calling OS thread (the caller's own namespace, unless it is inside Do).
func SameAsCurrent(path string) (bool, error) {
	var target unix.Stat_t
	if err := unix.Stat(path, &target); err != nil {
		return false, fmt.Errorf("netns: stat %s: %w", path, err)
	}
	// Lock so that the thread whose namespace is read is the caller's;
	// the lock nests, so this is also right when called inside Do.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var cur unix.Stat_t
	if err := unix.Stat(threadSelfNS, &cur); err != nil {
		return false, fmt.Errorf("netns: stat %s: %w", threadSelfNS, err)
	}
	return target.Dev == cur.Dev && target.Ino == cur.Ino, nil
}
