package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	e := Start(nil)
	e.U8(7)
	e.U16(513)
	e.U32(70000)
	e.I64(-5)
	e.Str16("pod")
	e.Bytes32([]byte{1, 2})
	e.Bytes32(nil)
	frame := e.Frame()

	b, err := ReadFrame(bytes.NewReader(frame), make([]byte, 0, 64), 1024)
	if err != nil {
		t.Fatal(err)
	}
	d := Dec{B: b}
	u8, u16, u32, i64, s, bs, empty := d.U8(), d.U16(), d.U32(), d.I64(), d.Str16(), d.Bytes32(), d.Bytes32()
	if err := d.Done(); err != nil {
		t.Fatal(err)
	}
	if u8 != 7 || u16 != 513 || u32 != 70000 || i64 != -5 || s != "pod" || !bytes.Equal(bs, []byte{1, 2}) || empty != nil {
		t.Errorf("decoded %v %v %v %v %q %v %v", u8, u16, u32, i64, s, bs, empty)
	}
	b[len(b)-6] = 9 // Bytes32 copies: the frame's buffer may be reused
	if !bytes.Equal(bs, []byte{1, 2}) {
		t.Errorf("Bytes32 aliases the frame: %v", bs)
	}
}

func TestBadFrames(t *testing.T) {
	e := Start(nil)
	e.Str16("abc")
	frame := e.Frame()
	if _, err := ReadFrame(bytes.NewReader(frame), nil, 2); err == nil {
		t.Error("a frame over the limit was read")
	}
	if _, err := ReadFrame(bytes.NewReader(frame[:len(frame)-1]), nil, 64); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut frame: %v", err)
	}
	d := Dec{B: frame[4 : len(frame)-1]}
	_ = d.Str16()
	if !errors.Is(d.Done(), ErrShort) {
		t.Errorf("short string: %v", d.Err)
	}
	d = Dec{B: append(frame[4:len(frame):len(frame)], 0)}
	_ = d.Str16()
	if d.Done() == nil {
		t.Error("a byte past the end was not reported")
	}
	d = Dec{B: []byte{0xff, 0xff, 0xff, 0xff}}
	if d.Bytes32() != nil || !errors.Is(d.Done(), ErrShort) {
		t.Errorf("length past the frame: %v", d.Err)
	}
}
