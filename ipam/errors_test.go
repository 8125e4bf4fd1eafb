package ipam

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestKindOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Kind
	}{
		{nil, 0},
		{errorf(KindExhausted, "pool %q: full", "p"), KindExhausted},
		{fmt.Errorf("wrapped: %w", errorf(KindInUse, "taken")), KindInUse},
		{&NoSuchPoolError{Name: "p"}, KindInvalid},
		{fmt.Errorf("get: %w", ErrUnavailable), KindUnavailable},
		{fmt.Errorf("txn: %w", ErrConflict), KindUnavailable},
		{context.DeadlineExceeded, KindUnavailable},
		{fmt.Errorf("commit: %w", ErrWrite), KindWriteFailed},
		{fmt.Errorf("GET ipamblocks/b: 401 Unauthorized: %w", ErrDenied), KindInvalid},
		{errors.New("something else"), KindInternal},
	} {
		if got := KindOf(tc.err); got != tc.want {
			t.Errorf("KindOf(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}

func TestErrorIsAndCause(t *testing.T) {
	err := fmt.Errorf("op: %w", errorf(KindUnavailable, "store: %w", ErrUnavailable))
	if !errors.Is(err, &Error{Kind: KindUnavailable}) || errors.Is(err, &Error{Kind: KindInvalid}) {
		t.Errorf("errors.Is by kind: wrong for %v", err)
	}
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("%v: the cause is lost", err)
	}
	if err.Error() != "op: store: store unavailable" {
		t.Errorf("message %q", err)
	}
	// A final error is a verdict: retry must not take it for a bare store
	// error and retry it.
	if !isError(err) || isError(fmt.Errorf("x: %w", ErrUnavailable)) {
		t.Error("isError")
	}
}
