package portmap

import (
	"fmt"

	"github.com/podnet/podnet/internal/kinderr"
)

// Kind is what a caller needs to know of a failed portmap operation to
// decide what to do. It speaks of mappings, host ports and the table:
// the package knows nothing of CNI, and portmapcni maps each kind to a
// CNI code, in one place. The shape is ipam's.
type Kind uint8

// The kinds of portmap failure. An error of no kind is unexpected (a
// bug).
const (
	// KindMalformed is a configuration that is not JSON that decodes.
	KindMalformed Kind = iota + 1
	// KindInvalid is a field of the configuration that is wrong, or a
	// container without an address a mapping can lead to.
	KindInvalid
	// KindConflict is a host port, or the container's address, that
	// belongs to another attachment.
	KindConflict
	// KindIO is a failure of the kernel or of the lock file (nftables,
	// conntrack, /proc/sys, the flock).
	KindIO
	// KindMissing is CHECK finding the table or the attachment's
	// elements not as ADD left them.
	KindMissing
)

var kindNames = [...]string{
	KindMalformed: "malformed configuration",
	KindInvalid:   "invalid configuration",
	KindConflict:  "conflict",
	KindIO:        "I/O failure",
	KindMissing:   "not as ADD left it",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("kind %d", uint8(k))
}

// Error is a failed operation of one of the kinds, with a message naming
// the value at fault. Callers match with errors.As, or with errors.Is
// against an *Error that has a Kind and nothing else:
//
//	errors.Is(err, &portmap.Error{Kind: portmap.KindConflict})
type Error = kinderr.Error[Kind]

func errorf(kind Kind, format string, args ...any) error {
	return kinderr.Errorf(kind, format, args...)
}
