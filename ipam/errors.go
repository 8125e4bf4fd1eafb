package ipam

import (
	"context"
	"errors"
	"fmt"

	"github.com/podnet/podnet/internal/kinderr"
)

// Kind is what a caller needs to know of a failed IPAM operation to decide
// what to do: fix the request, pick another address, add a pool, or try
// again later. The package knows nothing of CNI; the CNI boundary
// (ipamcni) maps each kind to an error code, in one place.
type Kind uint8

// The kinds of IPAM failure. KindOf(nil) is 0, which is none of them.
const (
	// KindInternal is a bug, or a value in the store that does not decode.
	KindInternal Kind = iota + 1
	// KindInvalid is a request or pool that cannot succeed as given: a bad
	// name, a pool that does not exist, an address in no pool, or a
	// store that refuses the configured credentials (ErrDenied).
	KindInvalid
	// KindInUse is an address another handle already holds.
	KindInUse
	// KindExhausted is a request the eligible pools have no free address
	// left for.
	KindExhausted
	// KindUnavailable is a store that stayed unreachable, or conflicting
	// writers that outlasted the deadline: the same request may succeed
	// later.
	KindUnavailable
	// KindNotFound is an object asked for by name that does not exist.
	KindNotFound
	// KindWriteFailed is a write the store accepted and then could not
	// make durable (ErrWrite: a full or read-only disk under bbolt).
	KindWriteFailed
)

var kindNames = [...]string{
	KindInternal:    "internal error",
	KindInvalid:     "invalid request",
	KindInUse:       "in use",
	KindExhausted:   "exhausted",
	KindUnavailable: "unavailable",
	KindNotFound:    "not found",
	KindWriteFailed: "write failed",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("kind %d", uint8(k))
}

// Error is a failed IPAM operation: its kind, a message naming the value
// at fault, and the store error that caused it if any (ErrUnavailable,
// ErrWrite...), so that errors.Is still finds that. Every error the
// Allocator returns is one, or wraps one (NoSuchPoolError). Callers match
// with errors.As, KindOf, or errors.Is against an *Error that has a Kind
// and nothing else:
//
//	errors.Is(err, &ipam.Error{Kind: ipam.KindExhausted})
type Error = kinderr.Error[Kind]

// errorf builds an *Error whose message is formatted like fmt.Errorf; a
// %w verb makes its operand the cause.
func errorf(kind Kind, format string, args ...any) *Error {
	return kinderr.Errorf(kind, format, args...)
}

// KindOf returns the kind of err: that of the first *Error in its chain,
// else the kind a bare store or context error implies (KindInvalid for
// ErrDenied, KindUnavailable for ErrUnavailable, ErrConflict and an ended
// context, KindWriteFailed for ErrWrite), else KindInternal. It returns 0
// for nil.
func KindOf(err error) Kind {
	var e *Error
	switch {
	case err == nil:
		return 0
	case errors.As(err, &e):
		return e.Kind
	case errors.Is(err, ErrDenied):
		return KindInvalid
	case errors.Is(err, ErrUnavailable), errors.Is(err, ErrConflict),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return KindUnavailable
	case errors.Is(err, ErrWrite):
		return KindWriteFailed
	default:
		return KindInternal
	}
}
