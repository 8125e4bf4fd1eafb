package nftelem

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

// conns opens, in a fresh node namespace, a google/nftables lasting
// connection and a Conn on its socket; both stay bound to the namespace.
func conns(t *testing.T) (*nftables.Conn, *Conn) {
	t.Helper()
	testutil.RequireRoot(t)
	_, path := testutil.NewNodeNetNS(t)
	var nc *nftables.Conn
	var ec *Conn
	if err := netns.Do(path, func() (err error) { nc, ec, err = Lasting(); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.CloseLasting() })
	return nc, ec
}

var (
	testTable = &nftables.Table{Name: "nftelem-test", Family: nftables.TableFamilyINet}
	keyHost4  = nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)
	keyPair4  = nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeIPAddr)
	dataDest4 = nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetService)
	plain4    = &nftables.Set{Table: testTable, Name: "plain4", KeyType: nftables.TypeIPAddr}
	plain6    = &nftables.Set{Table: testTable, Name: "plain6", KeyType: nftables.TypeIP6Addr}
	pair4     = &nftables.Set{Table: testTable, Name: "pair4", Concatenation: true, KeyType: keyPair4}
	host4     = &nftables.Set{Table: testTable, Name: "host4", IsMap: true, Concatenation: true, KeyType: keyHost4, DataType: dataDest4}
)

func ip(s string) []byte { return netip.MustParseAddr(s).AsSlice() }

// hostKey is addr . proto . port, each field padded to 4 bytes as
// nftables lays out a concatenation.
func hostKey(addr string, proto byte, port uint16) []byte {
	return append(ip(addr), proto, 0, 0, 0, byte(port>>8), byte(port), 0, 0)
}

func dest(addr string, port uint16) []byte { return append(ip(addr), byte(port>>8), byte(port), 0, 0) }

// fill makes the test table: plain and concatenated sets, a concatenated
// map, elements with and without comments.
func fill(t *testing.T, nc *nftables.Conn) {
	t.Helper()
	nc.AddTable(testTable)
	add := func(s *nftables.Set, els ...nftables.SetElement) {
		if err := nc.AddSet(s, els); err != nil {
			t.Fatal(err)
		}
	}
	add(plain4,
		nftables.SetElement{Key: ip("10.0.0.1"), Comment: "n1 ctr-a eth0"},
		nftables.SetElement{Key: ip("10.0.0.2")})
	add(plain6, nftables.SetElement{Key: ip("fd00::1"), Comment: "ctr-b eth0"})
	add(pair4, nftables.SetElement{Key: append(ip("10.0.0.3"), ip("10.0.0.3")...), Comment: "n1 ctr-c eth0"})
	add(host4, nftables.SetElement{Key: hostKey("198.18.0.1", unix.IPPROTO_TCP, 8080), Val: dest("10.0.0.4", 80), Comment: "n1 ctr-d eth0"})
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		nc.DelTable(testTable)
		if err := nc.Flush(); err != nil {
			t.Errorf("delete table: %v", err)
		}
	})
}

// TestGetByKey: elements come back with their key, data and comment,
// plain and concatenated keys, sets and maps; a missing key is NotFound
// and a missing set or table NoSet, none of them an error.
func TestGetByKey(t *testing.T) {
	nc, ec := conns(t)
	fill(t, nc)
	tests := []struct {
		name string
		q    Query
		want Result
	}{
		{"plain with comment", Query{"plain4", ip("10.0.0.1")},
			Result{Found, Element{Key: ip("10.0.0.1"), Comment: "n1 ctr-a eth0"}}},
		{"plain without comment", Query{"plain4", ip("10.0.0.2")}, Result{Found, Element{Key: ip("10.0.0.2")}}},
		{"IPv6", Query{"plain6", ip("fd00::1")}, Result{Found, Element{Key: ip("fd00::1"), Comment: "ctr-b eth0"}}},
		{"concatenated set", Query{"pair4", append(ip("10.0.0.3"), ip("10.0.0.3")...)},
			Result{Found, Element{Key: append(ip("10.0.0.3"), ip("10.0.0.3")...), Comment: "n1 ctr-c eth0"}}},
		{"concatenated map", Query{"host4", hostKey("198.18.0.1", unix.IPPROTO_TCP, 8080)},
			Result{Found, Element{Key: hostKey("198.18.0.1", unix.IPPROTO_TCP, 8080), Data: dest("10.0.0.4", 80), Comment: "n1 ctr-d eth0"}}},
		{"missing plain key", Query{"plain4", ip("10.0.0.9")}, Result{State: NotFound}},
		{"missing concatenated key", Query{"host4", hostKey("198.18.0.1", unix.IPPROTO_UDP, 8080)}, Result{State: NotFound}},
		{"missing set", Query{"nosuch4", ip("10.0.0.1")}, Result{State: NoSet}},
	}
	var qs []Query
	for _, tt := range tests {
		qs = append(qs, tt.q)
	}
	rs, err := ec.Get(testTable, qs) // all at once: one exchange
	if err != nil {
		t.Fatal(err)
	}
	for i, tt := range tests {
		got := rs[i]
		if got.State != tt.want.State || !bytes.Equal(got.Element.Key, tt.want.Element.Key) ||
			!bytes.Equal(got.Element.Data, tt.want.Element.Data) || got.Element.Comment != tt.want.Element.Comment {
			t.Errorf("%s: got %v %+v, want %v %+v", tt.name, got.State, got.Element, tt.want.State, tt.want.Element)
		}
	}

	rs, err = ec.Get(&nftables.Table{Name: "nosuch", Family: nftables.TableFamilyINet}, []Query{{"plain4", ip("10.0.0.1")}})
	if err != nil || len(rs) != 1 || rs[0].State != NoSet {
		t.Errorf("missing table: %+v, %v", rs, err)
	}
	rs, err = ec.Get(&nftables.Table{Name: testTable.Name, Family: nftables.TableFamilyIPv4}, []Query{{"plain4", ip("10.0.0.1")}})
	if err != nil || len(rs) != 1 || rs[0].State != NoSet {
		t.Errorf("same name, other family: %+v, %v", rs, err)
	}
	sharedSocketStillServes(t, nc)
}

// sharedSocketStillServes: google/nftables goes on working on the socket
// Get used, so nothing was left unread on it.
func sharedSocketStillServes(t *testing.T, nc *nftables.Conn) {
	t.Helper()
	if err := nc.SetDeleteElements(plain4, []nftables.SetElement{{Key: ip("10.0.0.2")}}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("a batch on the shared socket after Get: %v", err)
	}
	els, err := nc.GetSetElements(plain4)
	if err != nil {
		t.Fatalf("a listing on the shared socket after Get: %v", err)
	}
	for _, e := range els {
		if bytes.Equal(e.Key, ip("10.0.0.2")) {
			t.Fatal("the batch on the shared socket after Get did not delete 10.0.0.2")
		}
	}
}

// TestGetManyKeys: more queries than one exchange carries, found and
// missing interleaved, each answer at its query's place.
func TestGetManyKeys(t *testing.T) {
	nc, ec := conns(t)
	fill(t, nc)
	var els []nftables.SetElement
	for i := range 150 {
		els = append(els, nftables.SetElement{Key: ip(fmt.Sprintf("10.1.%d.%d", i/200, i%200+1)), Comment: fmt.Sprintf("n1 ctr-%d eth0", i)})
	}
	if err := nc.SetAddElements(plain4, els); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	var qs []Query
	for i := range 200 {
		qs = append(qs, Query{"plain4", ip(fmt.Sprintf("10.1.%d.%d", i/200, i%200+1))})
		if i%50 == 0 {
			qs = append(qs, Query{"nosuch", ip("10.1.0.1")})
		}
	}
	rs, err := ec.Get(testTable, qs)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != len(qs) {
		t.Fatalf("%d results for %d queries", len(rs), len(qs))
	}
	n := 0
	for i, q := range qs {
		switch {
		case q.Set == "nosuch":
			if rs[i].State != NoSet {
				t.Errorf("query %d (missing set): %v", i, rs[i].State)
			}
		case n < 150:
			if want := fmt.Sprintf("n1 ctr-%d eth0", n); rs[i].State != Found || rs[i].Element.Comment != want || !bytes.Equal(rs[i].Element.Key, q.Key) {
				t.Errorf("query %d: %v %+v, want %q", i, rs[i].State, rs[i].Element, want)
			}
			n++
		default:
			if rs[i].State != NotFound {
				t.Errorf("query %d (missing key): %v", i, rs[i].State)
			}
			n++
		}
	}
	sharedSocketStillServes(t, nc)
}

// TestGetBadKey: a key of the wrong length is the kernel's EINVAL, an
// error naming the key, set and table; the socket serves on.
func TestGetBadKey(t *testing.T) {
	nc, ec := conns(t)
	fill(t, nc)
	_, err := ec.Get(testTable, []Query{{"plain4", ip("10.0.0.1")}, {"host4", ip("198.18.0.1")}})
	if !errors.Is(err, unix.EINVAL) {
		t.Fatalf("wrong key length: %v, want EINVAL", err)
	}
	t.Log(err)
	rs, err := ec.Get(testTable, []Query{{"plain4", ip("10.0.0.1")}})
	if err != nil || rs[0].State != Found {
		t.Fatalf("after an error: %+v, %v", rs, err)
	}
	sharedSocketStillServes(t, nc)
}

// TestDial: a Conn with a socket of its own.
func TestDial(t *testing.T) {
	nc, _ := conns(t)
	fill(t, nc)
	// conns made the namespace; a second Conn in it, of its own.
	testutil.RequireRoot(t)
	_, path := testutil.NewNodeNetNS(t)
	var ec *Conn
	if err := netns.Do(path, func() (err error) { ec, err = Dial(); return err }); err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	rs, err := ec.Get(testTable, []Query{{"plain4", ip("10.0.0.1")}})
	if err != nil || rs[0].State != NoSet {
		t.Fatalf("another namespace sees the table: %+v, %v", rs, err)
	}
}
