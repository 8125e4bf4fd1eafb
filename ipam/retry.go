package ipam

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
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
		case errors.Is(err, ErrUnavailable) && ctx.Err() == nil && !isError(err):
			if unavailSince.IsZero() {
				unavailSince = time.Now()
			}
			if time.Since(unavailSince) >= a.cfg.UnavailableTimeout {
				return final(op, err)
			}
			d = waitUnavail/2 + rand.N(waitUnavail/2)
			waitUnavail = min(2*waitUnavail, 500*time.Millisecond)
		default:
			return final(op, err)
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			if errors.Is(err, ErrUnavailable) {
				return errorf(KindUnavailable, "%s: store unavailable until the deadline (%d attempts): %w", op, attempt, err)
			}
			return errorf(KindUnavailable, "%s: gave up after %d conflicting attempts: %w", op, attempt, ctx.Err())
		case <-t.C:
		}
	}
}

// final turns the error that ends an operation into the *Error callers
// get: the error itself if it already has a kind, else KindOf's verdict
// (unavailable for anything transient, write failed, internal) with the
// operation named.
func final(op string, err error) error {
	if isError(err) {
		return err
	}
	return &Error{Kind: KindOf(err), Msg: op + ": " + err.Error(), Err: err}
}

// isError reports whether err already carries a kind: an *Error is a
// verdict, never retried.
func isError(err error) bool {
	var e *Error
	return errors.As(err, &e)
}
