package cni

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The result cache is written through temp files named
// .NETWORK-ID-IF.tmp-N, next to the entry they replace (writeFileAtomic).
// A writer killed before its rename leaves its temp file in results/.
// Nothing else would ever remove it, and libcni's GetCachedAttachments,
// which reads every file there, takes a complete one for an attachment
// that ADD never reported. DEL and GC therefore sweep temp files whose
// writer is dead. The cache directory is shared by whatever runs on the
// node: the plugin manager, the CLI, other runtimes. So the sweep must
// never remove a file a live writer in another process is still writing.
//
// The rule: a writer holds an exclusive flock on its temp file from just
// after it creates the file until the rename has put it in place. The lock
// is taken on a second open file, so it survives the Close that reports
// write errors before the rename. The kernel drops the lock when the
// writer dies, however it dies, so a sweeper that can take the lock knows
// that no live writer owns the file. A PID in the name would need a
// guess about liveness instead. The PID may have been reused. It may also
// be another PID namespace's: the plugin manager in a pod and the CLI on
// the host share /var/lib/cni but not PIDs. An age alone would remove
// the file of a writer that is merely stopped or stuck on a slow disk.
//
// A sweeper also leaves every file alone until tempSweepAge has passed
// since its last write. Only writers that take no lock depend on that:
// podnet before this rule, and any other tool that writes this pattern.
// The one moment a podnet writer has a file but no lock yet (between
// creating the file and locking it) needs no such wait. The writer checks,
// once it holds the lock, that the name is still its file, and starts
// over if a sweep removed it.

// tempSweepAge is how long a temp file must have gone unwritten before a
// sweep removes it. A lock-taking writer is protected by its lock whatever
// the age. A writer without one takes well under a second to write a few
// kilobytes to a disk that works; should it still outlive the minute, its
// rename fails and its ADD reports an I/O error that the caller retries,
// and nothing is corrupted. A stray file lasts at most a minute longer.
const tempSweepAge = time.Minute

// tempPrefix is the name of path's temp files up to their random suffix.
func tempPrefix(path string) string {
	return "." + filepath.Base(path) + ".tmp-"
}

// isTempName reports whether name is a cache temp file whose name starts
// with prefix: the prefix, then only the digits os.CreateTemp puts for
// its "*". An entry's name never starts with a dot (a network name starts
// with a letter or digit), so a cache entry is never taken for one.
// Requiring digits after the prefix keeps ".net-c1-eth0.tmp-" from
// matching the temps of interface "eth0.tmp-5" on the same container.
func isTempName(name, prefix string) bool {
	if !strings.HasPrefix(name, prefix) {
		return false
	}
	if prefix == "." {
		// Any entry's temp: the random suffix follows the last ".tmp-".
		i := strings.LastIndex(name, ".tmp-")
		if i <= 1 {
			return false
		}
		prefix = name[:i+len(".tmp-")]
	}
	suffix := name[len(prefix):]
	if suffix == "" {
		return false
	}
	for _, c := range suffix {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// createLockedTemp creates a temp file for path in its directory, and the
// lock that marks the file's writer alive (see the rule above). The caller
// writes and closes tmp, renames or removes it, and only then closes lock.
func createLockedTemp(path string) (tmp, lock *os.File, err error) {
	for attempt := 1; ; attempt++ {
		tmp, err := os.CreateTemp(filepath.Dir(path), tempPrefix(path)+"*")
		if err != nil {
			return nil, nil, err
		}
		lock, err := lockTemp(tmp)
		if err == nil {
			return tmp, lock, nil
		}
		tmp.Close()
		if !errors.Is(err, errTempSwept) {
			_ = os.Remove(tmp.Name())
			return nil, nil, err
		}
		// A sweep removed the file before it was locked: the writer was
		// stopped for longer than tempSweepAge in between. Another file
		// will do. The bound only keeps a bug from looping forever.
		if attempt == 3 {
			return nil, nil, err
		}
	}
}

// errTempSwept says a temp file was removed by a sweep before its writer
// held the lock.
var errTempSwept = errors.New("cache temp file removed by a sweep before it was locked")

// lockTemp locks tmp on a second open file and confirms that tmp's name
// still refers to it. A sweeper removes a file only while it holds the
// lock, so once the writer holds it and the name is still its file, no
// sweep can remove that file until the lock is released.
func lockTemp(tmp *os.File) (*os.File, error) {
	lock, err := os.Open(tmp.Name())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errTempSwept
	}
	if err != nil {
		return nil, err
	}
	err = flock(lock, syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		// A sweeper holds it, about to remove the file.
		err = errTempSwept
	}
	if err == nil {
		err = sameFile(tmp, lock, tmp.Name())
	}
	if err != nil {
		lock.Close()
		return nil, err
	}
	return lock, nil
}

// sameFile returns errTempSwept unless a, b and the file named name are
// one file.
func sameFile(a, b *os.File, name string) error {
	ai, err := a.Stat()
	if err != nil {
		return err
	}
	bi, err := b.Stat()
	if err != nil {
		return err
	}
	ni, err := os.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return errTempSwept
	}
	if err != nil {
		return err
	}
	if !os.SameFile(ai, bi) || !os.SameFile(ai, ni) {
		return errTempSwept
	}
	return nil
}

// flock is flock(2) on f, retried when a signal interrupts it.
func flock(f *os.File, how int) error {
	raw, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var lockErr error
	if err := raw.Control(func(fd uintptr) {
		for {
			lockErr = syscall.Flock(int(fd), how)
			if lockErr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	return lockErr
}

// sweepDeadTemps removes the temp files in cacheDir/results whose names
// start with prefix ("." for every entry's) and whose writers are dead.
// It tries every file and returns every failure; a missing directory
// holds nothing to sweep.
func sweepDeadTemps(cacheDir, prefix string) error {
	results := filepath.Join(cacheDir, "results")
	d, err := os.Open(results)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return Errorf(CodeIOFailure, "cannot sweep the result cache's temp files: %v", err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return Errorf(CodeIOFailure, "cannot sweep the result cache's temp files: %v", err)
	}
	now := time.Now()
	var errs []error
	for _, name := range names {
		if !isTempName(name, prefix) {
			continue
		}
		if err := sweepDeadTemp(filepath.Join(results, name), now); err != nil {
			errs = append(errs, Errorf(CodeIOFailure, "cannot sweep the result cache's temp file %s: %v", name, err))
		}
	}
	return errors.Join(errs...)
}

// sweepDeadTemp removes the temp file at path if its writer is dead: it
// has not been written for tempSweepAge and nobody holds its lock.
func sweepDeadTemp(path string, now time.Time) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // renamed into place, or swept, since the listing
	}
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || now.Sub(fi.ModTime()) < tempSweepAge {
		return nil
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if err := flock(f, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil // a live writer's
		}
		return fmt.Errorf("lock: %w", err)
	}
	// No writer can take the lock while the sweep holds it. The file
	// opened must still be the one of that name: its writer may have
	// renamed it into place after the listing.
	if err := sameFile(f, f, path); err != nil {
		if errors.Is(err, errTempSwept) {
			return nil
		}
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
