package kinderr

import (
	"errors"
	"fmt"
)

// Error is a failed operation of one of a domain's kinds K, with a
// message naming the value at fault and, optionally, its cause. Callers
// match with errors.As, or with errors.Is against an *Error that has a
// Kind and nothing else:
//
//	errors.Is(err, &ipam.Error{Kind: ipam.KindExhausted})
type Error[K comparable] struct {
	Kind K
	Msg  string
	// Err is the cause, so that errors.Is and errors.As still find it.
	Err error
}

func (e *Error[K]) Error() string { return e.Msg }

// Unwrap returns the cause.
func (e *Error[K]) Unwrap() error { return e.Err }

// Is reports whether target is an *Error of the same domain and kind
// without a message or cause: a kind to match, not an error that
// happened.
func (e *Error[K]) Is(target error) bool {
	t, ok := target.(*Error[K])
	return ok && t.Kind == e.Kind && t.Msg == "" && t.Err == nil
}

// Errorf builds an *Error whose message is formatted as fmt.Errorf
// formats it; a %w verb makes its operand the cause.
func Errorf[K comparable](kind K, format string, args ...any) *Error[K] {
	w := fmt.Errorf(format, args...)
	return &Error[K]{Kind: kind, Msg: w.Error(), Err: errors.Unwrap(w)}
}
