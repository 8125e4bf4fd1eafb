package agentsock

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

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

// enc appends to a frame whose length is patched in by frame.
type enc struct{ b []byte }

func (e *enc) u8(v byte)   { e.b = append(e.b, v) }
func (e *enc) i64(v int64) { e.b = binary.BigEndian.AppendUint64(e.b, uint64(v)) }
func (e *enc) u32(v int)   { e.b = binary.BigEndian.AppendUint32(e.b, uint32(v)) }
func (e *enc) str(s []byte) {
	e.u32(len(s))
	e.b = append(e.b, s...)
}
func (e *enc) kv(kv ipam.KV) {
	e.str([]byte(kv.Key))
	e.str(kv.Value)
	e.i64(kv.ModRevision)
}

// start begins a frame in buf (reused), leaving room for the length.
func start(buf []byte) enc { return enc{b: append(buf[:0], 0, 0, 0, 0)} }

// frame patches the length in and returns the frame.
func (e *enc) frame() []byte {
	binary.BigEndian.PutUint32(e.b, uint32(len(e.b)-4))
	return e.b
}

func encodeRequest(buf []byte, r request) []byte {
	e := start(buf)
	e.u8(version)
	e.u8(r.op)
	e.u8(r.flags)
	e.i64(r.deadline)
	e.i64(r.modRev)
	e.str([]byte(r.key))
	e.str(r.value)
	return e.frame()
}

// readFrame reads one frame's bytes into buf (reused when large enough).
func readFrame(r *bufio.Reader, buf []byte, max int) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(h[:])
	if int64(n) > int64(max) {
		return nil, fmt.Errorf("frame of %d bytes, over the limit of %d", n, max)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}

// dec reads a frame's fields; the first error sticks and later reads
// return zero values.
type dec struct {
	b   []byte
	err error
}

var errShort = errors.New("truncated frame")

func (d *dec) take(n int) []byte {
	if d.err != nil || n < 0 || n > len(d.b) {
		if d.err == nil {
			d.err = errShort
		}
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *dec) u8() byte {
	if v := d.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (d *dec) i64() int64 {
	if v := d.take(8); v != nil {
		return int64(binary.BigEndian.Uint64(v))
	}
	return 0
}

func (d *dec) u32() int {
	if v := d.take(4); v != nil {
		return int(binary.BigEndian.Uint32(v))
	}
	return 0
}

// str returns the next string's bytes: a copy, since the frame buffer is
// reused by the next call.
func (d *dec) str() []byte {
	v := d.take(d.u32())
	if v == nil {
		return nil
	}
	return append([]byte(nil), v...)
}

func (d *dec) kv() ipam.KV {
	return ipam.KV{Key: string(d.str()), Value: d.str(), ModRevision: d.i64()}
}

// done reports a decode error, or bytes left over.
func (d *dec) done() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d bytes past the end of the frame", len(d.b))
	}
	return d.err
}

func decodeRequest(b []byte) (request, error) {
	d := dec{b: b}
	r := request{version: d.u8()}
	if d.err != nil || r.version != version {
		return r, d.err // another version: answered as unsupported
	}
	r.op, r.flags, r.deadline, r.modRev = d.u8(), d.u8(), d.i64(), d.i64()
	r.key = string(d.str())
	r.value = d.str()
	return r, d.done()
}
