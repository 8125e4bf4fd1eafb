package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Enc appends a frame's fields to B, after room for its length.
type Enc struct{ B []byte }

// Start begins a frame in buf, reused from its start.
func Start(buf []byte) Enc { return Enc{B: append(buf[:0], 0, 0, 0, 0)} }

func (e *Enc) U8(v byte)   { e.B = append(e.B, v) }
func (e *Enc) U16(v int)   { e.B = binary.BigEndian.AppendUint16(e.B, uint16(v)) }
func (e *Enc) U32(v int)   { e.B = binary.BigEndian.AppendUint32(e.B, uint32(v)) }
func (e *Enc) I64(v int64) { e.B = binary.BigEndian.AppendUint64(e.B, uint64(v)) }

// Str16 appends s with a uint16 length: the caller keeps s under 64 KiB.
func (e *Enc) Str16(s string) {
	e.U16(len(s))
	e.B = append(e.B, s...)
}

// Bytes32 appends b with a uint32 length.
func (e *Enc) Bytes32(b []byte) {
	e.U32(len(b))
	e.B = append(e.B, b...)
}

// Frame patches the length in and returns the frame.
func (e *Enc) Frame() []byte {
	binary.BigEndian.PutUint32(e.B, uint32(len(e.B)-4))
	return e.B
}

// ReadFrame reads one frame's bytes, at most max of them, into buf when
// it is large enough (else into a new slice).
func ReadFrame(r io.Reader, buf []byte, max int) ([]byte, error) {
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

// ErrShort is a frame that ends before its fields do.
var ErrShort = errors.New("truncated frame")

// Dec reads a frame's fields. The first error sticks in Err, and every
// later read returns a zero value.
type Dec struct {
	B   []byte
	Err error
}

// Take returns the next n bytes, which alias the frame.
func (d *Dec) Take(n int) []byte {
	if d.Err != nil || n < 0 || n > len(d.B) {
		if d.Err == nil {
			d.Err = ErrShort
		}
		return nil
	}
	v := d.B[:n:n]
	d.B = d.B[n:]
	return v
}

func (d *Dec) U8() byte {
	if v := d.Take(1); v != nil {
		return v[0]
	}
	return 0
}

func (d *Dec) U16() int {
	if v := d.Take(2); v != nil {
		return int(binary.BigEndian.Uint16(v))
	}
	return 0
}

func (d *Dec) U32() int {
	if v := d.Take(4); v != nil {
		return int(binary.BigEndian.Uint32(v))
	}
	return 0
}

func (d *Dec) I64() int64 {
	if v := d.Take(8); v != nil {
		return int64(binary.BigEndian.Uint64(v))
	}
	return 0
}

// Str16 reads a string with a uint16 length.
func (d *Dec) Str16() string {
	n := d.U16()
	if d.Err != nil {
		return ""
	}
	return string(d.Take(n))
}

// Bytes32 reads bytes with a uint32 length: a copy, since a reader may
// reuse the frame's buffer for the next one.
func (d *Dec) Bytes32() []byte {
	v := d.Take(d.U32())
	if v == nil {
		return nil
	}
	return append([]byte(nil), v...)
}

// Done returns the decode's error, or one for bytes left over.
func (d *Dec) Done() error {
	if d.Err == nil && len(d.B) != 0 {
		d.Err = fmt.Errorf("%d bytes past the end of the frame", len(d.B))
	}
	return d.Err
}
