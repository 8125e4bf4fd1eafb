package ipam

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/podnet/podnet/cni"
)

// retry runs fn until it succeeds, fails with something other than a
// conflict or an unreachable store, or the deadline passes. Every
// allocator operation goes through here; there is no other retry loop.
//
// Conflicts back off from 1 ms to 64 ms with full jitter, so contending
// writers spread out instead of colliding again in lockstep. An
// unreachable store (a member stopped, a leader election) backs off from
// 10 ms to 500 ms, for at most UnavailableTimeout: the next attempt goes
// to another member. Retrying is safe because every attempt starts from a
// fresh read and writes only under compares: if a lost answer hid a
// transaction that did commit, the next attempt finds its result (the
// handle's addresses, the pending affinity) and goes on from there.
func (a *Allocator) retry(ctx context.Context, op string, fn func(ctx context.Context) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.cfg.Timeout)
		defer cancel()
	}
	wait, waitUnavail := time.Millisecond, 10*time.Millisecond
	var unavailSince time.Time
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		var d time.Duration
		switch {
		case errors.Is(err, ErrConflict):
			d = rand.N(wait) + time.Microsecond
			wait = min(2*wait, 64*time.Millisecond)
		case errors.Is(err, ErrUnavailable) && ctx.Err() == nil && cni.CodeOf(err) == 0:
			if unavailSince.IsZero() {
				unavailSince = time.Now()
			}
			if time.Since(unavailSince) >= a.cfg.UnavailableTimeout {
				return toCNI(op, err)
			}
			d = waitUnavail/2 + rand.N(waitUnavail/2)
			waitUnavail = min(2*waitUnavail, 500*time.Millisecond)
		default:
			return toCNI(op, err)
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			if errors.Is(err, ErrUnavailable) {
				return cni.Errorf(cni.CodeTryAgainLater, "%s: store unavailable until the deadline (%d attempts): %v", op, attempt, err)
			}
			return cni.Errorf(cni.CodeTryAgainLater, "%s: gave up after %d conflicting attempts: %v", op, attempt, ctx.Err())
		case <-t.C:
		}
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
	case errors.Is(err, ErrWrite):
		return cni.Errorf(cni.CodeIOFailure, "%s: %v", op, err)
	default:
		return cni.Errorf(cni.CodeInternal, "%s: %v", op, err)
	}
}
