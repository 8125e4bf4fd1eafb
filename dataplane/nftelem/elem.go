package nftelem

import (
	"errors"
	"fmt"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/dataplane/nftlayout"
)

// Query names one element: its set (or map) and its key, laid out as the
// kernel holds it (a concatenation's fields each padded to 4 bytes, as
// google/nftables encodes keys for SetAddElements).
type Query struct {
	Set string
	Key []byte
}

// State says what a Get found for a Query.
type State uint8

const (
	// Found: the set has an element with the key.
	Found State = iota + 1
	// NotFound: the set exists and has no element with the key.
	NotFound
	// NoSet: the set does not exist, or its table does not.
	NoSet
)

func (s State) String() string {
	switch s {
	case Found:
		return "found"
	case NotFound:
		return "not found"
	case NoSet:
		return "no set"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Element is an element as the kernel returns it.
type Element struct {
	Key []byte
	// Data is a map element's value; nil for a set's element.
	Data []byte
	// Comment is the comment in the element's user data ("" when none).
	Comment string
}

// Result is the answer to one Query; Element is set when State is Found.
type Result struct {
	State   State
	Element Element
}

// ErrUnsupported is returned when the kernel cannot get an element by key
// (EOPNOTSUPP: the single-element get came with Linux 4.15; older
// kernels answer only dumps). A caller falls
// back to listing the set.
var ErrUnsupported = errors.New("nftelem: this kernel cannot get a set element by key (EOPNOTSUPP)")

// interpret turns the answers of one exchange into results: probes[j]
// answers the probe of set j (probeOf maps a set's name to j), elems[i]
// the element request of qs[i].
func interpret(t *nftables.Table, qs []Query, probeOf map[string]int, probes, elems []answer) ([]Result, error) {
	out := make([]Result, len(qs))
	for i, q := range qs {
		a, p := elems[i], probes[probeOf[q.Set]]
		switch {
		case a.errno == 0 && len(a.data) > 0:
			el, err := decodeElement(a.data[0])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", where(t, q), err)
			}
			out[i] = Result{State: Found, Element: el}
		case a.errno == 0:
			return nil, fmt.Errorf("%s: the kernel acknowledged the request without an element", where(t, q))
		case a.errno == unix.EOPNOTSUPP:
			return nil, ErrUnsupported
		case a.errno != unix.ENOENT:
			return nil, fmt.Errorf("%s: %w", where(t, q), a.errno)
		case p.errno == unix.ENOENT:
			out[i] = Result{State: NoSet}
		case p.errno != 0:
			return nil, fmt.Errorf("nftelem: look up set %s in table %s: %w", q.Set, nftlayout.Name(t), p.errno)
		default:
			out[i] = Result{State: NotFound}
		}
	}
	return out, nil
}

func where(t *nftables.Table, q Query) string {
	return fmt.Sprintf("nftelem: get the element %x of set %s in table %s", q.Key, q.Set, nftlayout.Name(t))
}
