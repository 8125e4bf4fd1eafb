package ipam

import (
	"bytes"
	"net/netip"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// A block is decoded and encoded on every allocation and release, by a
// plugin process that lives for one operation, so encoding/json's
// reflection (and its per-type warm-up, paid by every new process) was a
// large part of a plugin's CPU. Blocks are coded by hand instead, to the
// very bytes encoding/json writes for Block (the etcd and Kubernetes
// stores and older podnet versions share the format). Decoding has a fast
// path for the form encoding/json writes and falls back to encoding/json
// for anything else (whitespace, escapes, nulls, unknown or repeated
// keys), so what it accepts and what it produces stay encoding/json's.
// blockjson_test.go compares both ways against encoding/json.

// appendBlockJSON appends b as json.Marshal(b) writes it.
func appendBlockJSON(dst []byte, b *Block) ([]byte, error) {
	dst = append(dst, `{"cidr":`...)
	dst = appendJSONText(dst, b.CIDR)
	if b.Affinity != "" {
		dst = append(dst, `,"affinity":`...)
		dst = appendJSONString(dst, b.Affinity)
	}
	var err error
	if dst, err = appendJSONTime(dst, `,"affinitySince":`, b.AffinitySince); err != nil {
		return nil, err
	}
	dst = appendJSONInts(append(dst, `,"owners":`...), b.Owners)
	dst = appendJSONInts(append(dst, `,"free":`...), b.Free)
	if len(b.Attributes) > 0 {
		dst = append(dst, `,"attributes":[`...)
		for i := range b.Attributes {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendAttributesJSON(dst, &b.Attributes[i])
		}
		dst = append(dst, ']')
	}
	dst = strconv.AppendUint(append(dst, `,"sequence":`...), b.Sequence, 10)
	if dst, err = appendJSONTime(dst, `,"emptySince":`, b.EmptySince); err != nil {
		return nil, err
	}
	if dst, err = appendJSONTime(dst, `,"releasing":`, b.Releasing); err != nil {
		return nil, err
	}
	return append(dst, '}'), nil
}

func appendAttributesJSON(dst []byte, a *Attributes) []byte {
	dst = appendJSONString(append(dst, `{"handle":`...), a.Handle)
	if a.Node != "" {
		dst = appendJSONString(append(dst, `,"node":`...), a.Node)
	}
	if len(a.Extra) > 0 {
		dst = append(dst, `,"extra":{`...)
		keys := make([]string, 0, len(a.Extra))
		for k := range a.Extra {
			keys = append(keys, k)
		}
		slices.Sort(keys) // encoding/json sorts map keys bytewise
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, k)
			dst = appendJSONString(append(dst, ':'), a.Extra[k])
		}
		dst = append(dst, '}')
	}
	return append(dst, '}')
}

// appendJSONTime appends key and t as an omitzero time.Time field.
func appendJSONTime(dst []byte, key string, t time.Time) ([]byte, error) {
	if t.IsZero() {
		return dst, nil
	}
	v, err := t.MarshalJSON()
	if err != nil {
		return nil, err
	}
	return append(append(dst, key...), v...), nil
}

func appendJSONText(dst []byte, p netip.Prefix) []byte {
	t, _ := p.MarshalText() // never fails
	return appendJSONString(dst, string(t))
}

// appendJSONInts appends s as encoding/json does: null when nil.
func appendJSONInts(dst []byte, s []int) []byte {
	if s == nil {
		return append(dst, "null"...)
	}
	dst = append(dst, '[')
	for i, v := range s {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(v), 10)
	}
	return append(dst, ']')
}

const jsonHex = "0123456789abcdef"

// appendJSONString appends s quoted as encoding/json quotes it, HTML
// escaping included: <, > and & as \u003c..., U+2028 and U+2029 escaped,
// invalid UTF-8 as \ufffd.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', jsonHex[c>>4], jsonHex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(append(dst, s[start:i]...), `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(append(dst, s[start:i]...), '\\', 'u', '2', '0', '2', jsonHex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(append(dst, s[start:]...), '"')
}

// parseBlockJSON decodes data as json.Unmarshal into a new Block would,
// or reports false when data is not in the plain form encoding/json
// writes (then the caller decodes it with encoding/json, which also says
// what is wrong with it).
func parseBlockJSON(data []byte) (*Block, bool) {
	d := jsonParser{s: data}
	b := new(Block)
	var seen uint16
	ok := d.object(func(key []byte) bool {
		bit, ok := blockKeys[string(key)]
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
		return d.blockField(b, bit)
	})
	return b, ok && d.i == len(d.s)
}

var blockKeys = map[string]uint16{"cidr": 1, "affinity": 2, "affinitySince": 4, "owners": 8, "free": 16,
	"attributes": 32, "sequence": 64, "emptySince": 128, "releasing": 256}

func (d *jsonParser) blockField(b *Block, bit uint16) bool {
	switch bit {
	case 1:
		s, ok := d.str()
		return ok && b.CIDR.UnmarshalText(s) == nil
	case 2:
		s, ok := d.str()
		b.Affinity = string(s)
		return ok
	case 4:
		return d.time(&b.AffinitySince)
	case 8:
		return d.ints(&b.Owners)
	case 16:
		return d.ints(&b.Free)
	case 32:
		return d.attributes(&b.Attributes)
	case 64:
		n, ok := d.uint()
		b.Sequence = n
		return ok
	case 128:
		return d.time(&b.EmptySince)
	case 256:
		return d.time(&b.Releasing)
	}
	return false
}

func (d *jsonParser) attributes(out *[]Attributes) bool {
	as := []Attributes{}
	node := ""
	ok := d.array(func() bool {
		var a Attributes
		var seen uint8
		ok := d.object(func(key []byte) bool {
			var s []byte
			var ok bool
			switch k := string(key); {
			case k == "handle" && seen&1 == 0:
				seen |= 1
				s, ok = d.str()
				a.Handle = string(s)
			case k == "node" && seen&2 == 0:
				seen |= 2
				s, ok = d.str()
				a.Node = node
				if string(s) != node { // one node's block names it in every entry
					a.Node = string(s)
					node = a.Node
				}
			case k == "extra" && seen&4 == 0:
				seen |= 4
				ok = d.stringMap(&a.Extra)
			}
			return ok
		})
		as = append(as, a)
		return ok
	})
	*out = as
	return ok
}

// jsonParser reads the plain JSON encoding/json writes: no whitespace,
// no escapes, no nulls. Each method reports false on anything else.
type jsonParser struct {
	s []byte
	i int
}

func (d *jsonParser) next(c byte) bool {
	if d.i < len(d.s) && d.s[d.i] == c {
		d.i++
		return true
	}
	return false
}

// object reads {"key":value,...}, calling field to read each value.
func (d *jsonParser) object(field func(key []byte) bool) bool {
	if !d.next('{') {
		return false
	}
	if d.next('}') {
		return true
	}
	for {
		k, ok := d.str()
		if !ok || !d.next(':') || !field(k) {
			return false
		}
		if d.next('}') {
			return true
		}
		if !d.next(',') {
			return false
		}
	}
}

// array reads [value,...], calling elem to read each value.
func (d *jsonParser) array(elem func() bool) bool {
	if !d.next('[') {
		return false
	}
	if d.next(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if d.next(']') {
			return true
		}
		if !d.next(',') {
			return false
		}
	}
}

// str reads a string without escapes, of valid UTF-8 (which encoding/json
// would otherwise replace), and returns its bytes.
func (d *jsonParser) str() ([]byte, bool) {
	if !d.next('"') {
		return nil, false
	}
	start := d.i
	ascii := true
	for ; d.i < len(d.s); d.i++ {
		switch c := d.s[d.i]; {
		case c == '"':
			s := d.s[start:d.i]
			d.i++
			return s, ascii || utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

// uint reads a non-negative integer as encoding/json writes it (no sign,
// no leading zero, no fraction or exponent) that fits in 63 bits.
func (d *jsonParser) uint() (uint64, bool) {
	start := d.i
	var n uint64
	for d.i < len(d.s) && d.s[d.i] >= '0' && d.s[d.i] <= '9' {
		n = n*10 + uint64(d.s[d.i]-'0')
		d.i++
	}
	digits := d.i - start
	if digits == 0 || digits > 18 || digits > 1 && d.s[start] == '0' {
		return 0, false
	}
	return n, true
}

func (d *jsonParser) ints(out *[]int) bool {
	s := []int{}
	ok := d.array(func() bool {
		n, ok := d.uint()
		s = append(s, int(n))
		return ok
	})
	*out = s
	return ok
}

// time reads a string with time.Time's own UnmarshalJSON, as
// encoding/json does.
func (d *jsonParser) time(t *time.Time) bool {
	start := d.i
	if _, ok := d.str(); !ok {
		return false
	}
	return t.UnmarshalJSON(d.s[start:d.i]) == nil
}

// stringMap reads {"k":"v",...}; a repeated key keeps its last value, as
// encoding/json does.
func (d *jsonParser) stringMap(out *map[string]string) bool {
	m := map[string]string{}
	*out = m
	return d.object(func(key []byte) bool {
		v, ok := d.str()
		m[attrKey(key)] = string(v)
		return ok
	})
}

// attrKey is string(key), without a copy for the keys every endpoint's
// allocation has.
func attrKey(key []byte) string {
	switch string(key) {
	case AttrEndpoint:
		return AttrEndpoint
	case AttrCreated:
		return AttrCreated
	}
	return string(key)
}

// mayHoldHandle reports whether a block's stored value may name handle:
// false only when it provably does not, so that a block can be left
// undecoded. A value without a backslash has no escaped string: every
// JSON string in it stands between quotes as its own bytes, and a block
// that holds an address of handle has "handle" (quotes included) in it.
// A handle of invalid UTF-8 or with U+FFFD could be matched by a decoded
// string (encoding/json replaces invalid UTF-8 with U+FFFD) whose bytes
// differ, so such a value is always decoded. needle is quotedHandle(handle).
func mayHoldHandle(value []byte, handle string, needle []byte) bool {
	if needle == nil || bytes.IndexByte(value, '\\') >= 0 {
		return true
	}
	return bytes.Contains(value, needle)
}

// quotedHandle is the needle mayHoldHandle looks for, or nil when handle
// cannot be looked for that way.
func quotedHandle(handle string) []byte {
	if !utf8.ValidString(handle) {
		return nil
	}
	for _, r := range handle {
		if r == utf8.RuneError || r < 0x20 || r == '"' || r == '\\' {
			return nil
		}
	}
	return append(append([]byte{'"'}, handle...), '"')
}
