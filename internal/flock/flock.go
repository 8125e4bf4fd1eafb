// Package flock is an exclusive advisory lock on a file (flock(2)) with a
// timeout and a context: how the processes of one node take turns, the
// plugins on a bbolt store's file and on the node's IPAM operations.
package flock

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// ErrBusy means another process held the lock for the whole timeout, or
// until the context ended.
var ErrBusy = errors.New("lock busy")

// Lock is a held lock.
type Lock struct{ f *os.File }

// Acquire takes the exclusive lock on path, creating the file (and, on
// first use, its directory, private) if needed. It polls with jittered
// backoff from 20 µs to 2 ms: a blocking flock could not honour ctx, and
// the holders here keep it for about a millisecond.
func Acquire(ctx context.Context, path string, timeout time.Duration) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if errors.Is(err, fs.ErrNotExist) {
		// Made on first use only, so that a lock in steady state costs
		// one open.
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("lock %s: create its directory: %w", path, err)
		}
		f, err = os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	}
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	deadline := time.Now().Add(timeout)
	wait := 20 * time.Microsecond
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return &Lock{f: f}, nil
		}
		if err != syscall.EWOULDBLOCK && err != syscall.EINTR {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("lock %s: held by another process for %v: %w", path, timeout, ErrBusy)
		}
		// Jitter so that waiting processes do not wake in lockstep.
		d := wait/2 + rand.N(wait/2+1)
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("lock %s: %w (%w)", path, ErrBusy, ctx.Err())
		case <-time.After(d):
		}
		wait = min(2*wait, 2*time.Millisecond)
	}
}

// Release lets the lock go: closing the descriptor releases the flock.
func (l *Lock) Release() {
	l.f.Close()
}
