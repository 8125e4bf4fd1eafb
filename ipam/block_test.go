package ipam

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

func attrs(h string) Attributes { return Attributes{Handle: h, Node: "n1"} }

func TestBlockOrdinalAddr(t *testing.T) {
	tests := []struct {
		cidr string
		ord  int
		addr string
	}{
		{"10.0.0.0/26", 0, "10.0.0.0"},
		{"10.0.0.64/26", 63, "10.0.0.127"},
		{"10.1.2.0/24", 255, "10.1.2.255"},
		{"10.0.16.0/22", 1023, "10.0.19.255"},
		{"10.0.0.7/32", 0, "10.0.0.7"},
		{"fd00::40/122", 1, "fd00::41"},
		{"fd00:1::/118", 1023, "fd00:1::3ff"},
		{"fd00::1/128", 0, "fd00::1"},
	}
	for _, tt := range tests {
		b := NewBlock(netip.MustParsePrefix(tt.cidr), "")
		a := netip.MustParseAddr(tt.addr)
		if got := b.Addr(tt.ord); got != a {
			t.Errorf("%s: Addr(%d) = %s, want %s", tt.cidr, tt.ord, got, a)
		}
		if got, ok := b.Ordinal(a); !ok || got != tt.ord {
			t.Errorf("%s: Ordinal(%s) = %d,%v, want %d", tt.cidr, a, got, ok, tt.ord)
		}
		if err := b.Validate(); err != nil {
			t.Errorf("new block: %v", err)
		}
	}
	b := NewBlock(netip.MustParsePrefix("10.0.0.0/26"), "")
	for _, out := range []string{"10.0.0.64", "9.255.255.255", "fd00::1"} {
		if _, ok := b.Ordinal(netip.MustParseAddr(out)); ok {
			t.Errorf("Ordinal(%s) found in %s", out, b.CIDR)
		}
	}
}

func TestBlockFIFO(t *testing.T) {
	b := NewBlock(netip.MustParsePrefix("10.0.0.0/30"), "host:n1")
	got := b.AutoAllocate(3, attrs("a"), nil)
	want := []netip.Addr{netip.MustParseAddr("10.0.0.0"), netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")}
	if !slices.Equal(got, want) {
		t.Fatalf("AutoAllocate = %v, want %v", got, want)
	}
	b.Release(want[:1])
	// 10.0.0.3 was never used, so it comes before the released 10.0.0.0.
	if got := b.AutoAllocate(1, attrs("b"), nil); got[0] != netip.MustParseAddr("10.0.0.3") {
		t.Fatalf("after release got %v, want 10.0.0.3", got)
	}
	if got := b.AutoAllocate(5, attrs("c"), nil); !slices.Equal(got, want[:1]) {
		t.Fatalf("got %v, want %v", got, want[:1])
	}
	if b.NumFree() != 0 || b.AutoAllocate(1, attrs("d"), nil) != nil {
		t.Fatal("full block handed out an address")
	}
	if err := b.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestBlockAllocateAddr(t *testing.T) {
	b := NewBlock(netip.MustParsePrefix("fd00::/122"), "")
	a := netip.MustParseAddr("fd00::5")
	if err := b.AllocateAddr(a, attrs("h1")); err != nil {
		t.Fatal(err)
	}
	if err := b.AllocateAddr(a, attrs("h1")); err != nil {
		t.Fatalf("same handle again: %v", err)
	}
	var ae *AllocatedError
	if err := b.AllocateAddr(a, attrs("h2")); !errors.As(err, &ae) || ae.Owner.Handle != "h1" {
		t.Fatalf("other handle: err = %v, want AllocatedError owned by h1", err)
	}
	if err := b.AllocateAddr(netip.MustParseAddr("fd00::100"), attrs("h1")); !errors.Is(err, ErrNotInBlock) {
		t.Fatalf("outside: err = %v", err)
	}
	if b.NumFree() != 63 || slices.Contains(b.Free, 5) {
		t.Fatalf("free list %v still holds ordinal 5", b.Free)
	}
}

func TestBlockAttributesDedupeAndCompact(t *testing.T) {
	b := NewBlock(netip.MustParsePrefix("10.0.0.0/28"), "")
	x := Attributes{Handle: "x", Extra: map[string]string{"pod": "p"}}
	b.AutoAllocate(2, x, nil)
	b.AutoAllocate(1, Attributes{Handle: "y"}, nil)
	b.AutoAllocate(1, x, nil)
	if len(b.Attributes) != 2 {
		t.Fatalf("attributes = %+v, want 2 entries", b.Attributes)
	}
	if got := b.ReleaseHandle("x"); len(got) != 3 {
		t.Fatalf("released %v, want 3", got)
	}
	if len(b.Attributes) != 1 || b.Attributes[0].Handle != "y" {
		t.Fatalf("attributes after release = %+v", b.Attributes)
	}
	if h, ok := b.Owner(netip.MustParseAddr("10.0.0.2")); !ok || h.Handle != "y" {
		t.Fatalf("owner of 10.0.0.2 = %+v,%v", h, ok)
	}
	if err := b.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestBlockCloneIsDeep(t *testing.T) {
	b := NewBlock(netip.MustParsePrefix("10.0.0.0/29"), "")
	b.AutoAllocate(1, Attributes{Handle: "a", Extra: map[string]string{"k": "v"}}, nil)
	c := b.Clone()
	c.AutoAllocate(2, attrs("b"), nil)
	c.Attributes[0].Extra["k"] = "changed"
	c.Release([]netip.Addr{b.Addr(0)})
	if b.NumFree() != 7 || b.Owners[0] != 1 || b.Attributes[0].Extra["k"] != "v" {
		t.Fatalf("changing the clone changed the original: %+v", b)
	}
}

func TestBlockFilter(t *testing.T) {
	b := NewBlock(netip.MustParsePrefix("10.0.0.0/28"), "")
	lo, hi := netip.MustParseAddr("10.0.0.10"), netip.MustParseAddr("10.0.0.12")
	in := func(a netip.Addr) bool { return a.Compare(lo) >= 0 && a.Compare(hi) <= 0 }
	got := b.AutoAllocate(5, attrs("a"), in)
	if len(got) != 3 || got[0] != lo || got[2] != hi {
		t.Fatalf("got %v, want 10.0.0.10-12", got)
	}
	if err := b.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestBlockModel runs thousands of random operations against a block and
// against a trivially correct model (a map and a queue), comparing every
// observable after each step and surviving a JSON round trip.
func TestBlockModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	cidrs := []string{"10.0.0.0/29", "10.0.0.64/26", "fd00::/122", "fd00::8/125", "10.9.0.0/32"}
	handles := []string{"h0", "h1", "h2", "h3", "h4"}
	for run := range 400 {
		m := newBlockModel(netip.MustParsePrefix(cidrs[run%len(cidrs)]))
		for step := range 60 {
			h := handles[r.IntN(len(handles))]
			var err error
			switch op := r.IntN(5); op {
			case 0, 1:
				err = m.autoAllocate(r.IntN(4)+1, h)
			case 2:
				err = m.allocateAddr(m.b.Addr(r.IntN(m.b.Size())), h)
			case 3: // some of them free
				var addrs []netip.Addr
				for range r.IntN(4) + 1 {
					addrs = append(addrs, m.b.Addr(r.IntN(m.b.Size())))
				}
				err = m.release(addrs)
			case 4:
				err = m.releaseHandle(h)
			}
			if err != nil {
				t.Fatalf("run %d step %d: %v", run, step, err)
			}
			if r.IntN(8) == 0 {
				m.roundTrip(t)
			}
			checkModel(t, m.b, m.owner, m.queue)
		}
	}
}

// blockModel is a block beside what it must behave like.
type blockModel struct {
	b     *Block
	owner map[netip.Addr]string // address -> handle
	queue []netip.Addr          // free addresses, FIFO
}

func newBlockModel(cidr netip.Prefix) *blockModel {
	m := &blockModel{b: NewBlock(cidr, "host:n1"), owner: map[netip.Addr]string{}}
	for i := range m.b.Size() {
		m.queue = append(m.queue, m.b.Addr(i))
	}
	return m
}

func (m *blockModel) autoAllocate(n int, h string) error {
	got := m.b.AutoAllocate(n, attrs(h), nil)
	want := m.queue[:min(n, len(m.queue))]
	if !slices.Equal(got, want) {
		return fmt.Errorf("AutoAllocate(%d) = %v, want %v", n, got, want)
	}
	for _, a := range want {
		m.owner[a] = h
	}
	m.queue = slices.Clone(m.queue[len(want):])
	return nil
}

func (m *blockModel) allocateAddr(a netip.Addr, h string) error {
	err := m.b.AllocateAddr(a, attrs(h))
	prev, taken := m.owner[a]
	switch {
	case taken && prev != h:
		if err == nil {
			return fmt.Errorf("%s taken by %s, given to %s", a, prev, h)
		}
	case err != nil:
		return fmt.Errorf("AllocateAddr(%s): %v", a, err)
	case !taken:
		m.owner[a] = h
		i := slices.Index(m.queue, a)
		m.queue = slices.Delete(m.queue, i, i+1)
	}
	return nil
}

func (m *blockModel) release(addrs []netip.Addr) error {
	lost := m.b.Release(addrs)
	wantLost := map[string]int{}
	for _, a := range addrs {
		if o, ok := m.owner[a]; ok {
			wantLost[o]++
			delete(m.owner, a)
			m.queue = append(m.queue, a)
		}
	}
	if !maps.Equal(lost, wantLost) {
		return fmt.Errorf("Release lost %v, want %v", lost, wantLost)
	}
	return nil
}

func (m *blockModel) releaseHandle(h string) error {
	got := m.b.ReleaseHandle(h)
	var want []netip.Addr
	for i := range m.b.Size() {
		if a := m.b.Addr(i); m.owner[a] == h {
			want = append(want, a)
			delete(m.owner, a)
		}
	}
	m.queue = append(m.queue, want...)
	if !slices.Equal(got, want) {
		return fmt.Errorf("ReleaseHandle = %v, want %v", got, want)
	}
	return nil
}

// roundTrip replaces the block with its JSON round trip.
func (m *blockModel) roundTrip(t *testing.T) {
	raw, err := json.Marshal(m.b)
	if err != nil {
		t.Fatal(err)
	}
	m.b = new(Block)
	if err := json.Unmarshal(raw, m.b); err != nil {
		t.Fatal(err)
	}
}

func checkModel(t *testing.T, b *Block, owner map[netip.Addr]string, queue []netip.Addr) {
	t.Helper()
	if err := b.Validate(); err != nil {
		t.Fatal(err)
	}
	for i, ord := range b.Free {
		if b.Addr(ord) != queue[i] {
			t.Fatalf("free list %v differs from model %v", b.Free, queue)
		}
	}
	if len(b.Free) != len(queue) {
		t.Fatalf("free list has %d, model %d", len(b.Free), len(queue))
	}
	counts := map[string]int{}
	for a, h := range owner {
		counts[h]++
		if got, ok := b.Owner(a); !ok || got.Handle != h {
			t.Fatalf("owner of %s = %q,%v, want %q", a, got.Handle, ok, h)
		}
	}
	hc := b.HandleCounts()
	if len(hc) != len(counts) {
		t.Fatalf("handle counts %v, want %v", hc, counts)
	}
	for h, n := range counts {
		if hc[h] != n || len(b.AddrsOf(h)) != n {
			t.Fatalf("handle %s: count %d, addrs %v, want %d", h, hc[h], b.AddrsOf(h), n)
		}
	}
	if b.Empty() != (len(owner) == 0) {
		t.Fatalf("Empty() = %v with %d owners", b.Empty(), len(owner))
	}
}

func TestValidateRejectsCorruption(t *testing.T) {
	fresh := func() *Block {
		b := NewBlock(netip.MustParsePrefix("10.0.0.0/30"), "")
		b.AutoAllocate(1, attrs("a"), nil)
		return b
	}
	tests := map[string]func(b *Block){
		"dup free":       func(b *Block) { b.Free = append(b.Free, b.Free[0]) },
		"allocated free": func(b *Block) { b.Free = append(b.Free, 0) },
		"missing free":   func(b *Block) { b.Free = b.Free[1:] },
		"bad ref":        func(b *Block) { b.Owners[0] = 7 },
		"unused attr":    func(b *Block) { b.Attributes = append(b.Attributes, attrs("z")) },
		"short owners":   func(b *Block) { b.Owners = b.Owners[:2] },
		"unmasked cidr":  func(b *Block) { b.CIDR = netip.MustParsePrefix("10.0.0.1/30") },
	}
	for name, corrupt := range tests {
		b := fresh()
		corrupt(b)
		if err := b.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, b)
		}
	}
}
