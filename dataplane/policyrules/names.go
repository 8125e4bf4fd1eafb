package policyrules

import (
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"unicode/utf8"

	"github.com/podnet/podnet/policy"
)

// TableName is the inet table this package owns.
const TableName = "podnet-policy"

// Layout is the version of the table's layout this package writes (its
// nftlayout marker): Resync and Remove leave a table of a newer one.
const Layout = 1

// Names of the fixed objects.
const (
	chainForward = "forward"
	// chainForwardIngress judges forwarded packets' ingress side.
	chainForwardIngress = "forward-ingress"
	chainInput          = "input"
	chainOutput         = "output"
	mapIn4              = "in4"
	mapIn6              = "in6"
	mapOut4             = "out4"
	mapOut6             = "out6"
	setNode4            = "node4"
	setNode6            = "node6"
)

// hashLen is the hex digits of a name's hash: 64 bits, so that a node's
// few thousand names collide with odds below 1e-12, and names stay far
// below the kernel's NFT_SET_MAXNAMELEN and NFT_CHAIN_MAXNAMELEN (256).
const hashLen = 16

// hashName is prefix-<hash of key>: the same IR key gives the same name
// in every process, so a diff or a resync finds what an earlier Apply
// made without state. Names are remembered (an Apply asks for every
// name of the table again): up to maxNames, then forgotten all at once.
func hashName(prefix, key string) string {
	k := nameKey{prefix, key}
	names.mu.Lock()
	name, ok := names.m[k]
	names.mu.Unlock()
	if ok {
		return name
	}
	h := sha256.Sum256([]byte(prefix + "\x00" + key))
	name = prefix + "-" + hex.EncodeToString(h[:])[:hashLen]
	names.mu.Lock()
	if len(names.m) >= maxNames {
		clear(names.m)
	}
	names.m[k] = name
	names.mu.Unlock()
	return name
}

// maxNames bounds the names remembered: a node's table has a few
// thousand (its pods' chains, the sets their rules name), a large one
// tens of thousands.
const maxNames = 1 << 15

type nameKey struct{ prefix, key string }

var names = struct {
	mu sync.Mutex
	m  map[nameKey]string
}{m: map[nameKey]string{}}

// Direction is ingress or egress.
type Direction uint8

// The two directions.
const (
	Ingress Direction = iota
	Egress
)

func (d Direction) String() string {
	if d == Egress {
		return "egress"
	}
	return "ingress"
}

// tailChainName names the chain of what follows the Admin tier in pod's
// chain of direction d, when an Admin rule passes.
func tailChainName(pod policy.PodKey, d Direction) string {
	prefix := "intail"
	if d == Egress {
		prefix = "outtail"
	}
	return hashName(prefix, pod.String())
}

func podChainName(pod policy.PodKey, d Direction) string {
	prefix := "in"
	if d == Egress {
		prefix = "out"
	}
	return hashName(prefix, pod.String())
}

// maxComment bounds comments: nftables user data is a TLV with a one-byte
// length (and the kernel keeps at most 256 bytes of it).
const maxComment = 250

// comment truncates s to maxComment bytes on a rune boundary.
func comment(s string) string {
	if len(s) <= maxComment {
		return s
	}
	s = s[:maxComment]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
