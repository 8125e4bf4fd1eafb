package bolt

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/podnet/podnet/internal/flock"
	"github.com/podnet/podnet/ipam"
)

// fileLock is an exclusive flock on a side file. A side file, not the
// database itself, because bbolt retries its own lock only every 50 ms,
// which would dominate a plugin's ADD under contention.
type fileLock struct{ l *flock.Lock }

func lockFile(ctx context.Context, path string, timeout time.Duration) (*fileLock, error) {
	l, err := flock.Acquire(ctx, path, timeout)
	if errors.Is(err, flock.ErrBusy) {
		return nil, fmt.Errorf("%w: %w", err, ipam.ErrUnavailable)
	}
	if err != nil {
		return nil, err
	}
	return &fileLock{l: l}, nil
}

func (l *fileLock) unlock() { l.l.Release() }
