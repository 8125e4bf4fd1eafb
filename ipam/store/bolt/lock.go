package bolt

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

	"github.com/podnet/podnet/ipam"
)

// fileLock is an exclusive flock on a side file. A side file, not the
// database itself, because bbolt retries its own lock only every 50 ms,
// which would dominate a plugin's ADD under contention.
type fileLock struct{ f *os.File }

func lockFile(ctx context.Context, path string, timeout time.Duration) (*fileLock, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if errors.Is(err, fs.ErrNotExist) {
		// The store's directory (/var/lib/podnet on a fresh host) is made
		// on first use, private: the file says which pod has which
		// address. Only then, so an open in steady state costs nothing.
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
			return &fileLock{f: f}, nil
		}
		if err != syscall.EWOULDBLOCK && err != syscall.EINTR {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("lock %s: held by another process for %v: %w", path, timeout, ipam.ErrUnavailable)
		}
		// Jitter so that waiting processes do not wake in lockstep.
		d := wait/2 + rand.N(wait/2+1)
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("lock %s: %w (%w)", path, ipam.ErrUnavailable, ctx.Err())
		case <-time.After(d):
		}
		wait = min(2*wait, 2*time.Millisecond)
	}
}

func (l *fileLock) unlock() {
	// Closing the descriptor releases the flock.
	l.f.Close()
}
