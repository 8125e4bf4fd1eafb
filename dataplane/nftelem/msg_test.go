package nftelem

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

// attr builds a netlink attribute by hand (length, type, data, padding
// to 4 bytes), independently of the encoder under test.
func attr(typ uint16, data ...[]byte) []byte {
	body := bytes.Join(data, nil)
	b := binary.LittleEndian.AppendUint16(nil, uint16(4+len(body)))
	b = binary.LittleEndian.AppendUint16(b, typ)
	b = append(b, body...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func nested(typ uint16, data ...[]byte) []byte { return attr(unix.NLA_F_NESTED|typ, data...) }

func cstr(s string) []byte { return append([]byte(s), 0) }

var inetT = &nftables.Table{Name: "podnet-portmap", Family: nftables.TableFamilyINet}

// TestGetElemRequest: the request is what `nft get element` sends: a
// non-dump GETSETELEM with table, set and one list element holding the
// key as NFTA_DATA_VALUE, bytes as given (a concatenation's padding is
// the caller's, as for SetAddElements).
func TestGetElemRequest(t *testing.T) {
	key := []byte{10, 0, 0, 1, 6, 0, 0, 0, 0x1f, 0x90, 0, 0} // 10.0.0.1 . tcp . 8080
	m, err := getElemRequest(inetT, "hostip4", key)
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Type != unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_GETSETELEM {
		t.Errorf("type %#x", m.Header.Type)
	}
	if m.Header.Flags != unix.NLM_F_REQUEST|unix.NLM_F_ACK {
		t.Errorf("flags %#x: want request and ack, not dump", m.Header.Flags)
	}
	want := bytes.Join([][]byte{
		{unix.NFPROTO_INET, unix.NFNETLINK_V0, 0, 0},
		attr(unix.NFTA_SET_ELEM_LIST_TABLE, cstr("podnet-portmap")),
		attr(unix.NFTA_SET_ELEM_LIST_SET, cstr("hostip4")),
		nested(unix.NFTA_SET_ELEM_LIST_ELEMENTS,
			nested(unix.NFTA_LIST_ELEM,
				nested(unix.NFTA_SET_ELEM_KEY, attr(unix.NFTA_DATA_VALUE, key)))),
	}, nil)
	if !bytes.Equal(m.Data, want) {
		t.Errorf("payload\n got %x\nwant %x", m.Data, want)
	}
}

func TestGetSetRequest(t *testing.T) {
	m, err := getSetRequest(&nftables.Table{Name: "podnet", Family: nftables.TableFamilyINet}, "pods4-n1")
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Join([][]byte{
		{unix.NFPROTO_INET, 0, 0, 0},
		attr(unix.NFTA_SET_TABLE, cstr("podnet")),
		attr(unix.NFTA_SET_NAME, cstr("pods4-n1")),
	}, nil)
	if m.Header.Type != unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_GETSET || m.Header.Flags != unix.NLM_F_REQUEST|unix.NLM_F_ACK || !bytes.Equal(m.Data, want) {
		t.Errorf("got type %#x flags %#x %x, want %x", m.Header.Type, m.Header.Flags, m.Data, want)
	}
}

// elemMessage is a NEWSETELEM payload as the kernel writes it
// (nf_tables_fill_setelem_info): table, set, then the element list.
func elemMessage(elem ...[]byte) []byte {
	return bytes.Join([][]byte{
		{unix.NFPROTO_INET, 0, 0, 7},
		attr(unix.NFTA_SET_ELEM_LIST_TABLE, cstr("podnet-portmap")),
		attr(unix.NFTA_SET_ELEM_LIST_SET, cstr("dnat4")),
		nested(unix.NFTA_SET_ELEM_LIST_ELEMENTS, nested(unix.NFTA_LIST_ELEM, elem...)),
	}, nil)
}

func TestDecodeElement(t *testing.T) {
	key := []byte{6, 0, 0, 0, 0x1f, 0x90, 0, 0}
	data := []byte{10, 244, 0, 5, 0, 80, 0, 0}
	udata := append([]byte{1, 4, 1, 0, 0, 0, udataComment, 16}, cstr("n1 ctr-abc eth0")...)
	tests := []struct {
		name    string
		payload []byte
		want    Element
	}{
		{"map element with comment", elemMessage(
			nested(unix.NFTA_SET_ELEM_KEY, attr(unix.NFTA_DATA_VALUE, key)),
			nested(unix.NFTA_SET_ELEM_DATA, attr(unix.NFTA_DATA_VALUE, data)),
			attr(unix.NFTA_SET_ELEM_FLAGS, []byte{0, 0, 0, 0}),
			attr(unix.NFTA_SET_ELEM_USERDATA, udata),
		), Element{Key: key, Data: data, Comment: "n1 ctr-abc eth0"}},
		{"set element without user data", elemMessage(
			nested(unix.NFTA_SET_ELEM_KEY, attr(unix.NFTA_DATA_VALUE, []byte{10, 0, 0, 1})),
		), Element{Key: []byte{10, 0, 0, 1}}},
		{"nested flag absent, as older writers send", elemMessage(
			attr(unix.NFTA_SET_ELEM_KEY, attr(unix.NFTA_DATA_VALUE, []byte{10, 0, 0, 2})),
		), Element{Key: []byte{10, 0, 0, 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeElement(tt.payload)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Key, tt.want.Key) || !bytes.Equal(got.Data, tt.want.Data) || got.Comment != tt.want.Comment {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
	for _, bad := range [][]byte{nil, {1, 0}, elemMessage(), {1, 0, 0, 0, 200, 0, 1, 0}} {
		if _, err := decodeElement(bad); err == nil {
			t.Errorf("payload %x: no error", bad)
		}
	}
}

func TestComment(t *testing.T) {
	tests := []struct {
		udata []byte
		want  string
	}{
		{append([]byte{0, 4}, cstr("a b")...), "a b"},
		{[]byte{0, 3, 'a', ' ', 'b'}, "a b"},              // no NUL
		{append([]byte{1, 1, 9, 0, 2}, 'x', 0), "x"},      // after another TLV
		{[]byte{1, 1, 9}, ""},                             // none
		{[]byte{0, 9, 'a'}, ""},                           // runs past the end
		{append([]byte{1, 200}, make([]byte, 10)...), ""}, // so does the first
		{nil, ""},
	}
	for _, tt := range tests {
		if got := comment(tt.udata); got != tt.want {
			t.Errorf("comment(%x) = %q, want %q", tt.udata, got, tt.want)
		}
	}
}

func nlmsg(typ uint16, seq uint32, data []byte) syscall.NetlinkMessage {
	return syscall.NetlinkMessage{Header: syscall.NlMsghdr{Type: typ, Seq: seq}, Data: data}
}

func errMsg(seq uint32, code int32) syscall.NetlinkMessage {
	return nlmsg(unix.NLMSG_ERROR, seq, binary.NativeEndian.AppendUint32(make([]byte, 0, 20), uint32(code)))
}

// TestAbsorb: answers are filed by sequence number, an ack ends one
// (0, or a positive number from kernels before 5.9, is success), and
// what belongs to no request of the exchange is skipped.
func TestAbsorb(t *testing.T) {
	answers := make([]answer, 3)
	bySeq := map[uint32]int{100: 0, 101: 1, 102: 2}
	n, err := absorb(answers, bySeq, []syscall.NetlinkMessage{
		nlmsg(msgNewSetElem, 100, []byte("elem")),
		errMsg(100, 0),
		errMsg(99, -int32(unix.ENOENT)), // an older exchange's
		errMsg(101, -int32(unix.ENOENT)),
	})
	if err != nil || n != 2 {
		t.Fatalf("completed %d, %v", n, err)
	}
	n, err = absorb(answers, bySeq, []syscall.NetlinkMessage{
		nlmsg(msgNewSetElem, 102, []byte("e2")),
		errMsg(102, 120),
		errMsg(100, -int32(unix.EINVAL)), // 100 is done already
	})
	if err != nil || n != 1 {
		t.Fatalf("completed %d, %v", n, err)
	}
	if a := answers[0]; !a.done || a.errno != 0 || len(a.data) != 1 || string(a.data[0]) != "elem" {
		t.Errorf("answer 0: %+v", a)
	}
	if a := answers[1]; !a.done || a.errno != unix.ENOENT || len(a.data) != 0 {
		t.Errorf("answer 1: %+v", a)
	}
	if a := answers[2]; !a.done || a.errno != 0 || len(a.data) != 1 {
		t.Errorf("answer 2: %+v", a)
	}
	if _, err := absorb(make([]answer, 1), map[uint32]int{1: 0}, []syscall.NetlinkMessage{nlmsg(unix.NLMSG_ERROR, 1, []byte{0})}); err == nil {
		t.Error("a short error message was accepted")
	}
}

// TestInterpret: ENOENT means a missing key when the set's probe found
// the set, and a missing set (or table) when it did not.
func TestInterpret(t *testing.T) {
	found := elemMessage(nested(unix.NFTA_SET_ELEM_KEY, attr(unix.NFTA_DATA_VALUE, []byte{1, 2, 3, 4})))
	qs := []Query{{"a", []byte{1, 2, 3, 4}}, {"a", []byte{5}}, {"b", []byte{6}}}
	probeOf := map[string]int{"a": 0, "b": 1}
	probes := []answer{{done: true}, {done: true, errno: unix.ENOENT}}
	elems := []answer{{done: true, data: [][]byte{found}}, {done: true, errno: unix.ENOENT}, {done: true, errno: unix.ENOENT}}
	rs, err := interpret(inetT, qs, probeOf, probes, elems)
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].State != Found || !bytes.Equal(rs[0].Element.Key, []byte{1, 2, 3, 4}) || rs[1].State != NotFound || rs[2].State != NoSet {
		t.Errorf("results %+v", rs)
	}

	_, err = interpret(inetT, qs[:1], probeOf, probes, []answer{{done: true, errno: unix.EINVAL}})
	if !errors.Is(err, unix.EINVAL) || !strings.Contains(err.Error(), "01020304 of set a in table inet podnet-portmap") {
		t.Errorf("EINVAL: %v", err)
	}
	if _, err := interpret(inetT, qs[:1], probeOf, probes, []answer{{done: true, errno: unix.EOPNOTSUPP}}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("EOPNOTSUPP: %v", err)
	}
	if _, err := interpret(inetT, qs[:1], probeOf, probes, []answer{{done: true}}); err == nil {
		t.Error("an ack without an element was accepted")
	}
}
