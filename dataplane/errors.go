package dataplane

import (
	"errors"
	"fmt"
)

// Kinds of failure a caller can act on, for errors.Is. They speak of
// links, addresses and routes: what a kind means to a CNI runtime is the
// plugin's to say (plugins/podnet maps them to CNI codes), and this
// package knows nothing of CNI.
var (
	// ErrConflict: what the call would create is taken by something that
	// is not the caller's: a link of the same name, or the address routed
	// through another link (a duplicate IP).
	ErrConflict = errors.New("conflict")
	// ErrNotBridge: the link named as the bridge exists and is not a
	// bridge.
	ErrNotBridge = errors.New("not a bridge")
)

// Error is a failure of one of the kinds above. errors.Is matches its
// kind; errors.As gives its message without what wrapped it.
type Error struct {
	Kind error // ErrConflict, ErrNotBridge
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Unwrap returns the kind.
func (e *Error) Unwrap() error { return e.Kind }

func errorf(kind error, format string, args ...any) error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}
