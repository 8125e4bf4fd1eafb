package dataplane

import (
	"fmt"

	"github.com/podnet/podnet/internal/kinderr"
)

// Kind is what a caller needs to know of a failed dataplane operation to
// decide what to do. It speaks of links, addresses and routes: the
// package knows nothing of CNI, and the plugin maps each kind to a CNI
// code (plugins/podnet's cniError), in one place. The shape is ipam's.
type Kind uint8

// The kinds of dataplane failure a caller acts on. Any other failure is
// a plain error.
const (
	// KindConflict is something the call would create that is taken by
	// what is not the caller's: a link of the same name, or the address
	// routed through another link (a duplicate IP).
	KindConflict Kind = iota + 1
	// KindNotBridge is a link named as the bridge that exists and is not
	// a bridge.
	KindNotBridge
)

func (k Kind) String() string {
	switch k {
	case KindConflict:
		return "conflict"
	case KindNotBridge:
		return "not a bridge"
	}
	return fmt.Sprintf("kind %d", uint8(k))
}

// Error is a failed operation of one of the kinds, with a message naming
// the value at fault. Callers match with errors.As, or with errors.Is
// against an *Error that has a Kind and nothing else:
//
//	errors.Is(err, &dataplane.Error{Kind: dataplane.KindConflict})
type Error = kinderr.Error[Kind]

func errorf(kind Kind, format string, args ...any) error {
	return kinderr.Errorf(kind, format, args...)
}
