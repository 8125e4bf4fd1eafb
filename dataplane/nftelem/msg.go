package nftelem

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Message types, as nfnetlink spells them: subsystem in the high byte.
const (
	msgGetSetElem = unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETSETELEM
	msgNewSetElem = unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWSETELEM
	msgGetSet     = unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETSET
)

// udataComment is NFTNL_UDATA_SET_ELEM_COMMENT, the type of the comment's
// TLV in an element's user data (libnftnl's udata.h; google/nftables
// writes and reads the same).
const udataComment = 0

// nfgenmsg is the header after the netlink one: family, version, and a
// resource id the kernel ignores on these requests.
func nfgenmsg(family nftables.TableFamily) []byte {
	return []byte{byte(family), unix.NFNETLINK_V0, 0, 0}
}

// getElemRequest asks for the element of set with key: a non-dump
// NFT_MSG_GETSETELEM carrying one NFTA_LIST_ELEM. Acknowledge makes the
// kernel end every answer with an ack, so a found element (a
// NEWSETELEM, then an ack) and a missing one (an error) both end in a
// message of type error.
func getElemRequest(t *nftables.Table, set string, key []byte) (netlink.Message, error) {
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.NFTA_SET_ELEM_LIST_TABLE, t.Name)
	ae.String(unix.NFTA_SET_ELEM_LIST_SET, set)
	ae.Nested(unix.NFTA_SET_ELEM_LIST_ELEMENTS, func(list *netlink.AttributeEncoder) error {
		list.Nested(unix.NFTA_LIST_ELEM, func(el *netlink.AttributeEncoder) error {
			el.Nested(unix.NFTA_SET_ELEM_KEY, func(k *netlink.AttributeEncoder) error {
				k.Bytes(unix.NFTA_DATA_VALUE, key)
				return nil
			})
			return nil
		})
		return nil
	})
	return request(msgGetSetElem, t, ae)
}

// getSetRequest asks for the set itself (non-dump NFT_MSG_GETSET): its
// answer tells a missing set or table from a missing key.
func getSetRequest(t *nftables.Table, set string) (netlink.Message, error) {
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.NFTA_SET_TABLE, t.Name)
	ae.String(unix.NFTA_SET_NAME, set)
	return request(msgGetSet, t, ae)
}

func request(typ uint16, t *nftables.Table, ae *netlink.AttributeEncoder) (netlink.Message, error) {
	attrs, err := ae.Encode()
	if err != nil {
		return netlink.Message{}, err
	}
	return netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(typ), Flags: netlink.Request | netlink.Acknowledge},
		Data:   append(nfgenmsg(t.Family), attrs...),
	}, nil
}

// answer is what the kernel said to one request: the payloads of its
// data messages, then the errno of the ack that ends it (0: none).
type answer struct {
	data  [][]byte
	errno syscall.Errno
	done  bool
}

// absorb files msgs under the requests they answer, found by sequence
// number (bySeq maps a request's to its index in answers), and returns
// how many requests they completed. Messages of other sequence numbers (not this exchange's)
// are skipped.
func absorb(answers []answer, bySeq map[uint32]int, msgs []syscall.NetlinkMessage) (completed int, err error) {
	for _, m := range msgs {
		i, ok := bySeq[m.Header.Seq]
		if !ok || answers[i].done {
			continue
		}
		switch m.Header.Type {
		case unix.NLMSG_ERROR:
			if len(m.Data) < 4 {
				return completed, errors.New("nftelem: short netlink error message")
			}
			// Negative errno, or 0 for an ack. Kernels before 5.9 ack
			// a found element with a positive number (the length
			// nfnetlink_unicast returned): a success too.
			if code := int32(binary.NativeEndian.Uint32(m.Data[:4])); code < 0 {
				answers[i].errno = syscall.Errno(-code)
			}
			answers[i].done = true
			completed++
		case unix.NLMSG_NOOP, unix.NLMSG_DONE:
		default:
			// A copy: m.Data is the read buffer, which the next read
			// overwrites.
			answers[i].data = append(answers[i].data, bytes.Clone(m.Data))
		}
	}
	return completed, nil
}

// decodeElement reads the first element of a NEWSETELEM message's
// payload: nfgenmsg, then the element list.
func decodeElement(payload []byte) (Element, error) {
	if len(payload) < 4 {
		return Element{}, errors.New("nftelem: short set element message")
	}
	ad, err := netlink.NewAttributeDecoder(payload[4:])
	if err != nil {
		return Element{}, fmt.Errorf("nftelem: set element message: %w", err)
	}
	var el Element
	var found bool
	for ad.Next() {
		if ad.Type() != unix.NFTA_SET_ELEM_LIST_ELEMENTS {
			continue
		}
		ad.Nested(func(list *netlink.AttributeDecoder) error {
			for !found && list.Next() {
				if list.Type() == unix.NFTA_LIST_ELEM {
					found = true
					list.Nested(func(nd *netlink.AttributeDecoder) error { return decodeElemAttrs(nd, &el) })
				}
			}
			return nil
		})
	}
	if err := ad.Err(); err != nil {
		return Element{}, fmt.Errorf("nftelem: set element message: %w", err)
	}
	if !found || el.Key == nil {
		return Element{}, errors.New("nftelem: set element message without an element key")
	}
	return el, nil
}

func decodeElemAttrs(ad *netlink.AttributeDecoder, el *Element) error {
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_SET_ELEM_KEY:
			ad.Nested(func(nd *netlink.AttributeDecoder) error { el.Key = dataValue(nd); return nil })
		case unix.NFTA_SET_ELEM_DATA:
			ad.Nested(func(nd *netlink.AttributeDecoder) error { el.Data = dataValue(nd); return nil })
		case unix.NFTA_SET_ELEM_USERDATA:
			el.Comment = comment(ad.Bytes())
		}
	}
	return nil
}

// dataValue is the NFTA_DATA_VALUE of an nft_data nest (nil for a
// verdict, which this package does not read).
func dataValue(ad *netlink.AttributeDecoder) []byte {
	var v []byte
	for ad.Next() {
		if ad.Type() == unix.NFTA_DATA_VALUE {
			v = ad.Bytes()
		}
	}
	return v
}

// comment reads the comment TLV out of an element's user data, as
// google/nftables does (type, length, value; the value's trailing NUL
// dropped), but stops at a TLV that runs past the end instead of
// panicking.
func comment(udata []byte) string {
	for len(udata) >= 2 {
		typ, n := udata[0], int(udata[1])
		if len(udata) < 2+n {
			return ""
		}
		if typ == udataComment {
			v, _ := bytes.CutSuffix(udata[2:2+n], []byte{0})
			return string(v)
		}
		udata = udata[2+n:]
	}
	return ""
}
