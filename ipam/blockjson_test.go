package ipam

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

// jsonPieces make strings that exercise every escaping rule of
// encoding/json: HTML characters, quotes, control characters, U+2028,
// U+FFFD, invalid and truncated UTF-8.
var jsonPieces = []string{"a", "Z", "0", ".", "-", "/", ":", " ", "<", ">", "&", `"`, `\`, "\n", "\r", "\t", "\b", "\f",
	"\x00", "\x1f", "\x7f", "é", "日本", "\u2028", "\u2029", "\ufffd", "\xff", "\xc3", "💥", "podnet.0123abc"}

// plainPieces need no escaping.
var plainPieces = []string{"a", "Z", "0", ".", "-", "/", ":", " ", "é", "日本", "💥", "podnet.0123abc"}

func randString(r *rand.Rand, pieces []string) string {
	var sb strings.Builder
	for range r.IntN(5) {
		sb.WriteString(pieces[r.IntN(len(pieces))])
	}
	return sb.String()
}

func randTime(r *rand.Rand) time.Time {
	switch r.IntN(6) {
	case 0, 1:
		return time.Time{}
	case 2:
		return time.Unix(r.Int64N(1<<34), r.Int64N(1e9)).UTC()
	case 3:
		return time.Unix(r.Int64N(1<<34), 0).In(time.FixedZone("x", (r.IntN(48)-24)*1800))
	case 4:
		return time.Date(2026, 11, 29, 12, 0, 0, r.IntN(1000)*1000, time.Local)
	}
	return time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) // MarshalJSON fails
}

// randBlock returns a block, valid or not: the codec must match
// encoding/json on anything.
func randBlock(r *rand.Rand) *Block {
	pieces := plainPieces
	if r.IntN(3) == 0 {
		pieces = jsonPieces
	}
	str := func() string { return randString(r, pieces) }
	b := NewBlock(netip.MustParsePrefix("10.1.2.0/28"), "")
	switch r.IntN(8) {
	case 0:
		b.CIDR = netip.Prefix{}
	case 1:
		b = NewBlock(netip.MustParsePrefix("fd00::40/122"), "")
	}
	if r.IntN(2) == 0 {
		b.Affinity = HostAffinity(str())
	}
	b.AffinitySince = randTime(r)
	for range r.IntN(b.Size() + 1) {
		extra := map[string]string{}
		for range r.IntN(4) {
			extra[str()] = str()
		}
		if r.IntN(3) == 0 {
			extra = nil
		}
		b.AutoAllocate(1+r.IntN(2), Attributes{Handle: str(), Node: str(), Extra: extra}, nil)
	}
	if r.IntN(10) == 0 {
		b.Owners, b.Free = nil, nil
	}
	if r.IntN(10) == 0 {
		b.Attributes = []Attributes{}
	}
	b.Sequence = r.Uint64N(1 << uint(r.IntN(64)))
	b.EmptySince, b.Releasing = randTime(r), randTime(r)
	return b
}

// TestBlockJSONMatchesEncodingJSON: the hand codec writes the bytes
// encoding/json writes, and reads them back as encoding/json does.
func TestBlockJSONMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	fast := 0
	for i := range 3000 {
		b := randBlock(r)
		want, werr := json.Marshal(b)
		got, gerr := appendBlockJSON(nil, b)
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("block %d: encoding/json error %v, hand codec error %v", i, werr, gerr)
		}
		if werr != nil {
			continue
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("block %d:\nencoding/json %s\nhand codec    %s", i, want, got)
		}
		if checkBlockDecode(t, want) {
			fast++
		}
	}
	if fast < 1000 {
		t.Errorf("only %d of 3000 blocks took the fast path", fast)
	}
}

// checkBlockDecode fails t if parseBlockJSON accepts data and decodes it
// other than json.Unmarshal does; it reports whether it accepted it.
func checkBlockDecode(t *testing.T, data []byte) bool {
	t.Helper()
	got, ok := parseBlockJSON(data)
	if !ok {
		return false
	}
	var want Block
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatalf("hand codec accepted what encoding/json refuses (%v): %q", err, data)
	}
	if !reflect.DeepEqual(*got, want) {
		t.Fatalf("decoding %q:\nencoding/json %#v\nhand codec    %#v", data, want, *got)
	}
	return true
}

// TestBlockJSONFallback: what the fast path declines, and what it takes.
func TestBlockJSONFallback(t *testing.T) {
	for _, tc := range []struct {
		in   string
		fast bool
	}{
		{`{"cidr":"10.0.0.0/31","owners":[0,1],"free":[0],"attributes":[{"handle":"h","node":"n","extra":{"a":"b","a":"c"}}],"sequence":3}`, true},
		{`{"cidr":"10.0.0.0/31","owners":[],"free":[],"attributes":[],"sequence":0}`, true},
		{`{"cidr":"10.0.0.0/31","owners":null,"free":[0,1],"sequence":0}`, false},
		{`{"cidr":"10.0.0.0/31", "owners":[0,0],"free":[0,1],"sequence":0}`, false},
		{`{"CIDR":"10.0.0.0/31","owners":[0,0],"free":[0,1],"sequence":0}`, false},
		{`{"cidr":"10.0.0.0/31","cidr":"10.0.0.2/31","owners":[0,0],"free":[0,1],"sequence":0}`, false},
		{`{"cidr":"10.0.0.0/31","owners":[0,0],"free":[0,1],"sequence":0,"x":1}`, false},
		{`{"cidr":"10.0.0.0/31","owners":[0,0],"free":[0,1],"sequence":01}`, false},
		{`{"cidr":"10.0.0.0/31","owners":[0,0],"free":[0,1],"sequence":1e3}`, false},
		{`{"cidr":"10.0.0.0/31","owners":[-1,0],"free":[0,1],"sequence":0}`, false},
		{`{"cidr":"10.0.0.0/31","owners":[0,0],"free":[0,1],"sequence":99999999999999999999}`, false},
		{`{"cidr":"10.0.0.0/31","affinity":"host:\u006e","owners":[0,0],"free":[0,1],"sequence":0}`, false},
		{`{"cidr":"10.0.0.0/31","affinity":"host:` + "\xff" + `","owners":[0,0],"free":[0,1],"sequence":0}`, false},
		{`{"cidr":"10.0.0.0/31","affinitySince":"2026-13-01T00:00:00Z","owners":[0,0],"free":[0,1],"sequence":0}`, false},
		{`{"cidr":"10.0.0.0/99","owners":[0,0],"free":[0,1],"sequence":0}`, false},
		{`{"cidr":"10.0.0.0/31","owners":[0,0],"free":[0,1],"sequence":0} `, false},
		{`{"cidr":"10.0.0.0/31","owners":[0,0],"free":[0,1],"sequence":0}x`, false},
		{`{"cidr":"10.0.0.0/31","owners":[0,0],"free":[0,1],"sequence":0`, false},
	} {
		if got := checkBlockDecode(t, []byte(tc.in)); got != tc.fast {
			t.Errorf("fast path %v, want %v: %s", got, tc.fast, tc.in)
		}
	}
}

// FuzzBlockJSONDecode: whatever the fast path accepts, encoding/json
// accepts and decodes alike.
func FuzzBlockJSONDecode(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		if v, err := json.Marshal(randBlock(r)); err == nil {
			f.Add(v)
		}
	}
	f.Add([]byte(`{"cidr":"10.0.0.0/31","owners":[0,1],"free":[0],"attributes":[{"handle":"h","extra":{}}],"sequence":3}`))
	f.Fuzz(func(t *testing.T, data []byte) { checkBlockDecode(t, data) })
}

// FuzzBlockJSONEncode: the hand encoder writes encoding/json's bytes for
// blocks built from fuzzed strings and numbers.
func FuzzBlockJSONEncode(f *testing.F) {
	f.Add("host:n", "h<&>\u2028", "n", "k", "v\xff", uint64(7), int64(1), 3)
	f.Fuzz(func(t *testing.T, aff, handle, node, k, v string, seq uint64, sec int64, n int) {
		b := NewBlock(netip.MustParsePrefix("10.0.0.0/29"), aff)
		b.AutoAllocate(n%9, Attributes{Handle: handle, Node: node, Extra: map[string]string{k: v, v: k}}, nil)
		b.Sequence, b.EmptySince = seq, time.Unix(sec, sec).In(time.FixedZone("", int(sec%86400)))
		want, werr := json.Marshal(b)
		got, gerr := appendBlockJSON(nil, b)
		if (werr != nil) != (gerr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("encoding/json %s (%v)\nhand codec    %s (%v)", want, werr, got, gerr)
		}
		if werr == nil {
			checkBlockDecode(t, want)
		}
	})
}

// TestMayHoldHandle: the prefilter never hides a block that holds the
// handle, however the handle is escaped, and does filter plain values.
func TestMayHoldHandle(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	filtered := 0
	for i := range 2000 {
		b := randBlock(r)
		b.AffinitySince, b.EmptySince, b.Releasing = time.Time{}, time.Time{}, time.Time{}
		var plain bytes.Buffer
		enc := json.NewEncoder(&plain)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(b); err != nil {
			t.Fatal(err)
		}
		html, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range [][]byte{html, plain.Bytes()} {
			var got Block
			if err := json.Unmarshal(v, &got); err != nil {
				t.Fatal(err)
			}
			if got.Validate() != nil {
				continue // never decoded for an allocation
			}
			handles := []string{randString(r, jsonPieces), "podnet.0123abc", "podnet.0123abd"}
			for _, a := range append(b.Attributes, got.Attributes...) {
				handles = append(handles, a.Handle)
			}
			for _, h := range handles {
				holds := len(got.AddrsOf(h)) > 0
				may := mayHoldHandle(v, h, quotedHandle(h))
				if holds && !may {
					t.Fatalf("block %d: prefilter hides handle %q in %s", i, h, v)
				}
				if !may {
					filtered++
				}
			}
		}
	}
	if filtered == 0 {
		t.Error("the prefilter never filtered")
	}
	for _, h := range []string{"a\"b", `a\b`, "a\xffb", "a\ufffdb", "a\x01b"} {
		if quotedHandle(h) != nil {
			t.Errorf("handle %q: looked for verbatim, though its JSON may differ", h)
		}
	}
}
