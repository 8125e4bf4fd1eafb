package agentsock

import (
	"context"
	"errors"

	"github.com/podnet/podnet/internal/wire"
	"github.com/podnet/podnet/ipam"
)

// A frame is a big-endian uint32 length and that many bytes. A request's
// bytes are
//
//	version u8 | op u8 | flags u8 | deadline i64 (unix ns, 0: none) | modRevision i64 | key str | value str
//
// and an answer's are a status u8 (in every version: a client of another
// version can read the refusal), then for statusOK the op's result
// (Get: kv; List: count u32, count kvs; Write: revision i64), else the
// error's message str. A str is a uint32 length and its bytes; a kv is
// key str, value str, modRevision i64.
//
// The version changes with the format: the agent installs the plugin
// binaries, but during an upgrade an old plugin may meet a new agent, and
// a request of another version is answered with statusUnsupported and a
// message saying so, never misread.
const (
	version byte = 1

	opGet   byte = 'G'
	opList  byte = 'L'
	opWrite byte = 'W'

	flagFresh  byte = 1 << 0
	flagDelete byte = 1 << 1
)

// Answer statuses: statusOK, or the identity of the error. New ones are
// added at the end, in the same version: a client that does not know a
// status reads it as statusOther, with the message intact.
const (
	statusOK byte = iota
	statusNotFound
	statusConflict
	statusUnavailable
	statusWrite
	statusCompacted
	statusUnsupported
	statusOther
	statusDenied
)

// Frame size limits. A request carries at most one object (a full /26
// block is ~20 KB, etcd's limit 1.5 MiB); an answer may carry a List of
// every block of a large cluster.
const (
	maxRequest = 16 << 20
	maxAnswer  = 1 << 30
)

// statusErrors maps each error status to the sentinel it carries.
var statusErrors = map[byte]error{
	statusNotFound:    ipam.ErrNotFound,
	statusConflict:    ipam.ErrConflict,
	statusUnavailable: ipam.ErrUnavailable,
	statusWrite:       ipam.ErrWrite,
	statusCompacted:   ipam.ErrCompacted,
	statusUnsupported: errors.ErrUnsupported,
	statusDenied:      ipam.ErrDenied,
}

// statusOf is the status that carries err's identity across the wire. A
// backend call cut short by the request's deadline is unavailable, as
// the stores report it themselves.
func statusOf(err error) byte {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return statusUnavailable
	}
	// Fixed order: an error matching several keeps the same status.
	for _, s := range []byte{statusConflict, statusNotFound, statusUnavailable, statusWrite, statusCompacted, statusUnsupported, statusDenied} {
		if errors.Is(err, statusErrors[s]) {
			return s
		}
	}
	return statusOther
}

// remoteError is an error the server's store returned: its message, and
// the identity errors.Is finds (nil for statusOther).
type remoteError struct {
	msg  string
	kind error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.kind }

// request is one call, decoded.
type request struct {
	version  byte
	op       byte
	flags    byte
	deadline int64
	modRev   int64
	key      string
	value    []byte
}

// putKV and getKV are a key-value's fields.
func putKV(e *wire.Enc, kv ipam.KV) {
	e.Bytes32([]byte(kv.Key))
	e.Bytes32(kv.Value)
	e.I64(kv.ModRevision)
}

func getKV(d *wire.Dec) ipam.KV {
	return ipam.KV{Key: string(d.Bytes32()), Value: d.Bytes32(), ModRevision: d.I64()}
}

func encodeRequest(buf []byte, r request) []byte {
	e := wire.Start(buf)
	e.U8(version)
	e.U8(r.op)
	e.U8(r.flags)
	e.I64(r.deadline)
	e.I64(r.modRev)
	e.Bytes32([]byte(r.key))
	e.Bytes32(r.value)
	return e.Frame()
}

func decodeRequest(b []byte) (request, error) {
	d := wire.Dec{B: b}
	r := request{version: d.U8()}
	if d.Err != nil || r.version != version {
		return r, d.Err // another version: answered as unsupported
	}
	r.op, r.flags, r.deadline, r.modRev = d.U8(), d.U8(), d.I64(), d.I64()
	r.key = string(d.Bytes32())
	r.value = d.Bytes32()
	return r, d.Done()
}
