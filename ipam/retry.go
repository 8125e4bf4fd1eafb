package ipam

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/podnet/podnet/cni"
)

// retry runs fn until it succeeds, fails with something other than a
// conflict, or the deadline passes. Every allocator operation goes through
// here; there is no other retry loop. Backoff doubles from 1 ms to 64 ms
// with full jitter, so contending writers spread out instead of colliding
// again in lockstep.
func (a *Allocator) retry(ctx context.Context, op string, fn func(ctx context.Context) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.cfg.Timeout)
		defer cancel()
	}
	wait := time.Millisecond
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		if !errors.Is(err, ErrConflict) {
			return toCNI(op, err)
		}
		t := time.NewTimer(rand.N(wait) + time.Microsecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return cni.Errorf(cni.CodeTryAgainLater, "%s: gave up after %d conflicting attempts: %v", op, attempt, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, 64*time.Millisecond)
	}
}

// toCNI turns an error into the *cni.Error callers get: code 11 for
// anything transient, the error itself if it already is one, 100 else.
func toCNI(op string, err error) error {
	var ce *cni.Error
	switch {
	case errors.As(err, &ce):
		return err
	case errors.Is(err, ErrUnavailable), errors.Is(err, ErrConflict),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return cni.Errorf(cni.CodeTryAgainLater, "%s: %v", op, err)
	default:
		return cni.Errorf(cni.CodeInternal, "%s: %v", op, err)
	}
}
