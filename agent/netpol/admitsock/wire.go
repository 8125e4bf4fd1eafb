package admitsock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
)

// A request's bytes are
//
//	version u8 | deadline i64 (unix ns, 0: none) | namespace str | name str |
//	containerID str | ifName str | hostIf str | count u8 | count addrs
//
// where a str is a uint16 length and its bytes and an addr a length u8
// (4 or 16) and its bytes. An answer's are a status u8 (in every
// version, so a plugin of another version reads a refusal), then for
// statusFailed and statusUnsupported a message str.
const version byte = 1

// Answer statuses.
const (
	statusNotSelected byte = iota
	statusSelected
	statusFailed
	statusUnsupported
)

// Frame limits: a request is a few hundred bytes, an answer a message.
const (
	maxRequest = 4 << 10
	maxAnswer  = 64 << 10
	maxAddrs   = 16
)

// Pod is what ADD tells the agent of the pod it is wiring.
type Pod struct {
	// Namespace and Name are the pod's (K8S_POD_NAMESPACE,
	// K8S_POD_NAME).
	Namespace, Name string
	// ContainerID, IfName and HostIf name the attachment: the sandbox,
	// the pod's interface and its host end.
	ContainerID, IfName, HostIf string
	// Addrs are the pod's addresses on this attachment.
	Addrs []netip.Addr
}

func (p Pod) String() string { return p.Namespace + "/" + p.Name }

// request is a Pod on the wire, with the caller's deadline.
type request struct {
	version  byte
	deadline int64
	pod      Pod
}

type enc struct{ b []byte }

func (e *enc) u8(v byte)   { e.b = append(e.b, v) }
func (e *enc) i64(v int64) { e.b = binary.BigEndian.AppendUint64(e.b, uint64(v)) }
func (e *enc) str(s string) {
	e.b = binary.BigEndian.AppendUint16(e.b, uint16(len(s)))
	e.b = append(e.b, s...)
}

// frame patches the length in.
func (e *enc) frame() []byte {
	binary.BigEndian.PutUint32(e.b, uint32(len(e.b)-4))
	return e.b
}

func newEnc() enc { return enc{b: make([]byte, 4, 256)} }

// encodeRequest fails on what does not fit the wire: a field over 64 KiB
// or more than maxAddrs addresses, neither of which a pod has.
func encodeRequest(r request) ([]byte, error) {
	p := r.pod
	for _, f := range []string{p.Namespace, p.Name, p.ContainerID, p.IfName, p.HostIf} {
		if len(f) > 0xffff {
			return nil, fmt.Errorf("field of %d bytes", len(f))
		}
	}
	if len(p.Addrs) > maxAddrs {
		return nil, fmt.Errorf("%d addresses, over the limit of %d", len(p.Addrs), maxAddrs)
	}
	e := newEnc()
	e.u8(r.version)
	e.i64(r.deadline)
	for _, f := range []string{p.Namespace, p.Name, p.ContainerID, p.IfName, p.HostIf} {
		e.str(f)
	}
	e.u8(byte(len(p.Addrs)))
	for _, a := range p.Addrs {
		s := a.Unmap().AsSlice()
		e.u8(byte(len(s)))
		e.b = append(e.b, s...)
	}
	b := e.frame()
	if len(b)-4 > maxRequest {
		return nil, fmt.Errorf("request of %d bytes, over the limit of %d", len(b)-4, maxRequest)
	}
	return b, nil
}

func encodeAnswer(status byte, msg string) []byte {
	e := newEnc()
	e.u8(status)
	if status == statusFailed || status == statusUnsupported {
		if len(msg) > maxAnswer-8 {
			msg = msg[:maxAnswer-8]
		}
		e.str(msg)
	}
	return e.frame()
}

// readFrame reads one frame of at most max bytes.
func readFrame(r io.Reader, max int) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(h[:])
	if int64(n) > int64(max) {
		return nil, fmt.Errorf("frame of %d bytes, over the limit of %d", n, max)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return b, nil
}

// dec reads a frame's fields; the first error sticks.
type dec struct {
	b   []byte
	err error
}

var errShort = errors.New("truncated frame")

func (d *dec) take(n int) []byte {
	if d.err != nil || n > len(d.b) {
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

func (d *dec) str() string {
	n := d.take(2)
	if n == nil {
		return ""
	}
	return string(d.take(int(binary.BigEndian.Uint16(n))))
}

func (d *dec) done() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d bytes past the end of the frame", len(d.b))
	}
	return d.err
}

// decodeRequest decodes a request; one of another version is returned
// with only its version set, for the server to refuse.
func decodeRequest(b []byte) (request, error) {
	d := dec{b: b}
	r := request{version: d.u8()}
	if d.err != nil || r.version != version {
		return r, d.err
	}
	r.deadline = d.i64()
	p := &r.pod
	p.Namespace, p.Name, p.ContainerID, p.IfName, p.HostIf = d.str(), d.str(), d.str(), d.str(), d.str()
	n := int(d.u8())
	if n > maxAddrs {
		return r, fmt.Errorf("%d addresses, over the limit of %d", n, maxAddrs)
	}
	for range n {
		raw := d.take(int(d.u8()))
		if d.err != nil {
			break
		}
		a, ok := netip.AddrFromSlice(raw)
		if !ok {
			return r, fmt.Errorf("address of %d bytes", len(raw))
		}
		p.Addrs = append(p.Addrs, a)
	}
	return r, d.done()
}

// decodeAnswer returns the status and, for a failure, its message.
func decodeAnswer(b []byte) (byte, string, error) {
	d := dec{b: b}
	st := d.u8()
	var msg string
	if st == statusFailed || st == statusUnsupported {
		msg = d.str()
	}
	return st, msg, d.done()
}
