package admitsock

import (
	"fmt"
	"net/netip"

	"github.com/podnet/podnet/internal/wire"
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
	e := wire.Start(make([]byte, 0, 256))
	e.U8(r.version)
	e.I64(r.deadline)
	for _, f := range []string{p.Namespace, p.Name, p.ContainerID, p.IfName, p.HostIf} {
		e.Str16(f)
	}
	e.U8(byte(len(p.Addrs)))
	for _, a := range p.Addrs {
		s := a.Unmap().AsSlice()
		e.U8(byte(len(s)))
		e.B = append(e.B, s...)
	}
	b := e.Frame()
	if len(b)-4 > maxRequest {
		return nil, fmt.Errorf("request of %d bytes, over the limit of %d", len(b)-4, maxRequest)
	}
	return b, nil
}

func encodeAnswer(status byte, msg string) []byte {
	e := wire.Start(make([]byte, 0, 256))
	e.U8(status)
	if status == statusFailed || status == statusUnsupported {
		if len(msg) > maxAnswer-8 {
			msg = msg[:maxAnswer-8]
		}
		e.Str16(msg)
	}
	return e.Frame()
}

// decodeRequest decodes a request; one of another version is returned
// with only its version set, for the server to refuse.
func decodeRequest(b []byte) (request, error) {
	d := wire.Dec{B: b}
	r := request{version: d.U8()}
	if d.Err != nil || r.version != version {
		return r, d.Err
	}
	r.deadline = d.I64()
	p := &r.pod
	p.Namespace, p.Name, p.ContainerID, p.IfName, p.HostIf = d.Str16(), d.Str16(), d.Str16(), d.Str16(), d.Str16()
	n := int(d.U8())
	if n > maxAddrs {
		return r, fmt.Errorf("%d addresses, over the limit of %d", n, maxAddrs)
	}
	for range n {
		raw := d.Take(int(d.U8()))
		if d.Err != nil {
			break
		}
		a, ok := netip.AddrFromSlice(raw)
		if !ok {
			return r, fmt.Errorf("address of %d bytes", len(raw))
		}
		p.Addrs = append(p.Addrs, a)
	}
	return r, d.Done()
}

// decodeAnswer returns the status and, for a failure, its message.
func decodeAnswer(b []byte) (byte, string, error) {
	d := wire.Dec{B: b}
	st := d.U8()
	var msg string
	if st == statusFailed || st == statusUnsupported {
		msg = d.Str16()
	}
	return st, msg, d.Done()
}
