package ipam

import (
	"encoding/json"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"testing"
)

func randIndex(r *rand.Rand) *NodeIndex {
	pieces := plainPieces
	if r.IntN(3) == 0 {
		pieces = jsonPieces
	}
	x := &NodeIndex{Node: randString(r, pieces)}
	states := []AffinityState{AffinityPending, AffinityConfirmed, AffinityPendingDeletion, AffinityState(randString(r, pieces))}
	for i := range r.IntN(4) {
		x.Blocks = append(x.Blocks, NodeBlock{CIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, byte(i), 0}), 26),
			State: states[r.IntN(len(states))], Since: randTime(r)})
	}
	for i := range r.IntN(3) {
		b := BorrowedBlock{CIDR: netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 15: byte(i)}), 122)}
		for j := range r.IntN(3) {
			b.IPs = append(b.IPs, netip.AddrFrom4([4]byte{10, 1, 0, byte(j)}), netip.MustParseAddr("fd00::1%eth0"))
		}
		if r.IntN(4) == 0 {
			b.IPs = []netip.Addr{}
		}
		x.Borrowed = append(x.Borrowed, b)
	}
	if r.IntN(5) == 0 {
		x.Blocks = []NodeBlock{}
	}
	return x
}

// checkIndexDecode fails t if parseIndexJSON accepts data and decodes it
// other than json.Unmarshal does; it reports whether it accepted it.
func checkIndexDecode(t *testing.T, data []byte) bool {
	t.Helper()
	got, ok := parseIndexJSON(data)
	if !ok {
		return false
	}
	var want NodeIndex
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatalf("fast path accepted what encoding/json refuses (%v): %q", err, data)
	}
	if !reflect.DeepEqual(*got, want) {
		t.Fatalf("decoding %q:\nencoding/json %#v\nfast path     %#v", data, want, *got)
	}
	return true
}

func checkPoolDecode(t *testing.T, data []byte) bool {
	t.Helper()
	got, ok := parsePoolJSON(data)
	if !ok {
		return false
	}
	var want Pool
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatalf("fast path accepted what encoding/json refuses (%v): %q", err, data)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoding %q:\nencoding/json %#v\nfast path     %#v", data, want, got)
	}
	return true
}

// TestIndexPoolJSONMatchesEncodingJSON: indexes and pools as encoding/json
// writes them decode alike by the fast path and by encoding/json.
func TestIndexPoolJSONMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	fast := 0
	for range 2000 {
		if v, err := json.Marshal(randIndex(r)); err == nil && checkIndexDecode(t, v) {
			fast++
		}
		p := Pool{Name: randString(r, plainPieces), CIDR: netip.MustParsePrefix("10.0.0.0/16"), BlockSize: r.IntN(40) - 5,
			NodeSelector: randString(r, jsonPieces), Disabled: r.IntN(2) == 0}
		if v, err := json.Marshal(p); err == nil && checkPoolDecode(t, v) {
			fast++
		}
	}
	if fast < 1500 {
		t.Errorf("only %d of 4000 values took the fast path", fast)
	}
	for _, s := range []string{`{"node":"n","blocks":null}`, `{"node":"n","Node":"m"}`, `{"node":"n","blocks":[{"cidr":"10.0.0.0/26","state":"x","since":"0001-01-01T00:00:00Z","x":1}]}`,
		`{"name":"p","disabled":tru}`, `{"name":"p","blockSize":-1}`, `{"name":"p","disabled":true,"disabled":false}`} {
		if checkIndexDecode(t, []byte(s)) || checkPoolDecode(t, []byte(s)) {
			t.Errorf("fast path took %s", s)
		}
	}
}

func FuzzIndexJSONDecode(f *testing.F) {
	r := rand.New(rand.NewPCG(9, 10))
	for range 10 {
		if v, err := json.Marshal(randIndex(r)); err == nil {
			f.Add(v)
		}
	}
	f.Add([]byte(`{"name":"p","cidr":"10.0.0.0/16","blockSize":26,"nodeSelector":"a=b","disabled":true}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkIndexDecode(t, data)
		checkPoolDecode(t, data)
	})
}
