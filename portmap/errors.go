package portmap

import (
	"errors"
	"fmt"
)

// Kinds of failure, for errors.Is. They speak of mappings, host ports and
// the table: a CNI plugin maps them to its codes (portmapcni.Error), and
// this package knows nothing of CNI. An error of no kind is unexpected (a
// bug).
var (
	// ErrMalformed: the configuration is not JSON that decodes.
	ErrMalformed = errors.New("malformed configuration")
	// ErrInvalidConfig: a field of the configuration is wrong, or the
	// container has no address a mapping can lead to.
	ErrInvalidConfig = errors.New("invalid configuration")
	// ErrConflict: a host port, or the container's address, belongs to
	// another attachment.
	ErrConflict = errors.New("conflict")
	// ErrIO: the kernel or the lock file failed (nftables, conntrack,
	// /proc/sys, the flock).
	ErrIO = errors.New("I/O failure")
	// ErrMissing: CHECK found the table or the attachment's elements not
	// as ADD left them.
	ErrMissing = errors.New("not as ADD left it")
)

// Error is a failure of one of the kinds above. errors.Is matches its
// kind; errors.As gives its message without what wrapped it.
type Error struct {
	Kind error // ErrMalformed, ErrInvalidConfig, ErrConflict, ErrIO, ErrMissing
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Unwrap returns the kind.
func (e *Error) Unwrap() error { return e.Kind }

func errorf(kind error, format string, args ...any) error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}
