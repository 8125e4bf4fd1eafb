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
	"sync"
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
	f, err := open(path)
	if err != nil {
		return nil, err
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

// TryAcquire takes the lock on path if it is free now, and fails with
// ErrBusy at once if another holds it: for a caller whose answer to a
// held lock is "try again later", not a wait.
func TryAcquire(path string) (*Lock, error) {
	f, err := open(path)
	if err != nil {
		return nil, err
	}
	for {
		switch err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err {
		case nil:
			return &Lock{f: f}, nil
		case syscall.EINTR:
			continue
		case syscall.EWOULDBLOCK:
			f.Close()
			return nil, fmt.Errorf("lock %s: held by another process: %w", path, ErrBusy)
		default:
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
	}
}

// AcquireLong is Acquire for a lock whose holders keep it for tens of
// milliseconds or more (the node's IPAM lock, held across API round
// trips): after a first try it waits in the kernel, which wakes the
// waiters when the holder lets go. Acquire's polling would wake every
// waiting process every 2 ms for the whole wait: 400 plugins waiting on
// 10 node locks (BenchmarkModelBAllocations, 10 x 40) spent a 2-core
// machine on it (load 238) while the holders starved past the 20 s
// timeout. Acquire stays for bbolt's file lock, held about a
// millisecond, where polling hands over sooner (podnet bench, parallel
// 10: ADD p50 30 ms polling, 39 ms waiting in the kernel).
func AcquireLong(ctx context.Context, path string, timeout time.Duration) (*Lock, error) {
	f, err := open(path)
	if err != nil {
		return nil, err
	}
	switch err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); {
	case err == nil:
		return &Lock{f: f}, nil
	case err != syscall.EWOULDBLOCK && err != syscall.EINTR:
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return wait(ctx, f, path, timeout)
}

// wait blocks in flock on a thread of its own until the lock is taken,
// the timeout passes or ctx ends. A wait given up on goes on: the waiter
// owns f from then on, and closes it (letting the lock go at once) when
// flock returns.
func wait(ctx context.Context, f *os.File, path string, timeout time.Duration) (*Lock, error) {
	var mu sync.Mutex
	abandoned := false
	done := make(chan error, 1)
	go func() {
		var err error
		for {
			if err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != syscall.EINTR {
				break
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if abandoned {
			f.Close()
			return
		}
		done <- err
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var why error
	select {
	case err := <-done:
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		return &Lock{f: f}, nil
	case <-timer.C:
		why = fmt.Errorf("lock %s: held by another process for %v: %w", path, timeout, ErrBusy)
	case <-ctx.Done():
		why = fmt.Errorf("lock %s: %w (%w)", path, ErrBusy, ctx.Err())
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case <-done: // taken (or failed) meanwhile: let it go
		f.Close()
	default:
		abandoned = true
	}
	return nil, why
}

// open opens (creating) the lock file.
func open(path string) (*os.File, error) {
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
	return f, nil
}

// Release lets the lock go: closing the descriptor releases the flock.
func (l *Lock) Release() {
	l.f.Close()
}
