package portmap

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/podnet/podnet/dataplane/tag"
)

// readBy is what a table holding existing shows ADD when ADD reads only
// keys and the sets of list (what AddLookups asks for).
func readBy(existing, keys []Entry, list []string) []Entry {
	var out []Entry
	for _, x := range existing {
		if slices.Contains(list, x.Set()) || slices.ContainsFunc(keys, x.SameElement) {
			out = append(out, x)
		}
	}
	return out
}

// TestAddLookupsDecideAsTheWholeTable: Reconcile given only what
// AddLookups reads refuses, adds and takes over exactly what it does
// given every element; the one difference allowed is that the owner's
// elements under keys it no longer wants are left (AddLookups says why).
func TestAddLookupsDecideAsTheWholeTable(t *testing.T) {
	host2 := netip.MustParseAddr("198.18.0.2")
	dnat := func(o tag.Owner, p Protocol, hostIP netip.Addr, port uint16, pod netip.Addr) Entry {
		return Entry{Kind: DNAT, Proto: p, HostIP: hostIP, HostPort: port, PodIP: pod, PodPort: 8080, Owner: o}
	}
	snat := func(o tag.Owner, pod netip.Addr) Entry { return Entry{Kind: SNAT, PodIP: pod, Owner: o} }
	var crowd []Entry // other containers' elements, which ADD must not need
	for i := range 50 {
		pod := netip.AddrFrom4([4]byte{10, 2, byte(i), 1})
		o := tag.Owner{Network: "net", ContainerID: fmt.Sprintf("c%d", i), IfName: "eth0"}
		crowd = append(crowd, dnat(o, TCP, netip.Addr{}, uint16(20000+i), pod), snat(o, pod))
	}
	any4, any6 := netip.Addr{}, netip.Addr{}
	tests := []struct {
		name     string
		existing []Entry
		want     []Entry
		conflict bool
		stale    int // owner's elements the whole table would remove and the lookups do not see
	}{
		{"new", nil, []Entry{dnat(ownerA, TCP, any4, 80, podA), snat(ownerA, podA)}, false, 0},
		{"again", []Entry{dnat(ownerA, TCP, any4, 80, podA), snat(ownerA, podA)},
			[]Entry{dnat(ownerA, TCP, any4, 80, podA), snat(ownerA, podA)}, false, 0},
		{"port taken on any address", []Entry{dnat(ownerB, TCP, any4, 80, podB)},
			[]Entry{dnat(ownerA, TCP, any4, 80, podA)}, true, 0},
		{"any address, port taken on one", []Entry{dnat(ownerB, TCP, host, 80, podB)},
			[]Entry{dnat(ownerA, TCP, any4, 80, podA)}, true, 0},
		{"one address, port taken on any", []Entry{dnat(ownerB, TCP, any4, 80, podB)},
			[]Entry{dnat(ownerA, TCP, host, 80, podA)}, true, 0},
		{"one address, port taken on it", []Entry{dnat(ownerB, TCP, host, 80, podB)},
			[]Entry{dnat(ownerA, TCP, host, 80, podA)}, true, 0},
		{"one address, port taken on another", []Entry{dnat(ownerB, TCP, host2, 80, podB)},
			[]Entry{dnat(ownerA, TCP, host, 80, podA)}, false, 0},
		{"other protocol", []Entry{dnat(ownerB, UDP, host, 80, podB), dnat(ownerB, UDP, any4, 80, podB)},
			[]Entry{dnat(ownerA, TCP, any4, 80, podA)}, false, 0},
		{"other family", []Entry{dnat(ownerB, TCP, any6, 80, podA6)},
			[]Entry{dnat(ownerA, TCP, any4, 80, podA)}, false, 0},
		{"former holder of the address, SNAT", []Entry{snat(ownerB, podA)}, []Entry{snat(ownerA, podA)}, false, 0},
		{"former holder of the address, same key", []Entry{dnat(ownerB, TCP, any4, 80, podA)},
			[]Entry{dnat(ownerA, TCP, any4, 80, podA)}, false, 0},
		{"former holder of the address, on one host address", []Entry{dnat(ownerB, TCP, host, 80, podA)},
			[]Entry{dnat(ownerA, TCP, any4, 80, podA)}, false, 0},
		{"former holder of the address, on any", []Entry{dnat(ownerB, TCP, any4, 80, podA)},
			[]Entry{dnat(ownerA, TCP, host, 80, podA)}, false, 0},
		{"owner's own, other host address", []Entry{dnat(ownerA, TCP, any4, 80, podA)},
			[]Entry{dnat(ownerA, TCP, host, 80, podA)}, false, 0},
		{"owner's stale mapping", []Entry{dnat(ownerA, TCP, any4, 81, podA), dnat(ownerA, UDP, any4, 80, podA)},
			[]Entry{dnat(ownerA, TCP, any4, 80, podA)}, false, 2},
		{"owner's stale hostIP mapping is in the listed map", []Entry{dnat(ownerA, TCP, host, 81, podA)},
			[]Entry{dnat(ownerA, TCP, any4, 80, podA)}, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			existing := append(slices.Clone(crowd), tt.existing...)
			keys, list := AddLookups(tt.want)
			read := readBy(existing, keys, list)
			if len(read) > len(tt.existing)+len(tt.want) {
				t.Errorf("ADD reads %d elements for %d wanted: others' too", len(read), len(tt.want))
			}
			whole, errWhole := Reconcile(ownerA, tt.want, existing)
			part, errPart := Reconcile(ownerA, tt.want, read)
			if (errWhole != nil) != tt.conflict {
				t.Fatalf("whole table: %v, want conflict %v", errWhole, tt.conflict)
			}
			if fmt.Sprint(errWhole) != fmt.Sprint(errPart) {
				t.Fatalf("by key: %v, whole table: %v", errPart, errWhole)
			}
			if fmt.Sprint(part.Add) != fmt.Sprint(whole.Add) {
				t.Errorf("adds by key %v, whole table %v", part.Add, whole.Add)
			}
			var missed []Entry
			for _, d := range whole.Del {
				if !slices.ContainsFunc(part.Del, d.SameElement) {
					missed = append(missed, d)
				}
			}
			if len(part.Del)+len(missed) != len(whole.Del) || len(missed) != tt.stale {
				t.Errorf("dels by key %v, whole table %v", part.Del, whole.Del)
			}
			for _, m := range missed {
				if m.Owner != ownerA {
					t.Errorf("by key, ADD leaves another owner's element it would remove: %v", m)
				}
			}
		})
	}
}

func TestAddLookups(t *testing.T) {
	want := []Entry{
		{Kind: DNAT, Proto: TCP, HostIP: host, HostPort: 80, PodIP: podA},
		{Kind: DNAT, Proto: TCP, HostIP: host, HostPort: 80, PodIP: podA6},
		{Kind: DNAT, Proto: UDP, HostPort: 53, PodIP: podA6},
		{Kind: SNAT, PodIP: podA},
	}
	keys, list := AddLookups(want)
	var got []string
	for _, k := range keys {
		got = append(got, fmt.Sprintf("%s %x", k.Set(), k.Key()))
	}
	wantKeys := []string{
		"hostip4 c6120001060000000050" + "0000",
		"dnat4 0600000000500000",
		"dnat6 0600000000500000", // the counterpart; hostip6 is listed
		"dnat6 1100000000350000",
		"snat4 0a0100020a010002",
	}
	if fmt.Sprint(got) != fmt.Sprint(wantKeys) || fmt.Sprint(list) != "[hostip6]" {
		t.Errorf("keys %q list %v\nwant %q list [hostip6]", got, list, wantKeys)
	}
}

func TestDelKeys(t *testing.T) {
	c := &Config{SNAT: false, Mappings: []Mapping{{Proto: TCP, HostPort: 80, ContainerPort: 8080}}}
	r := &Request{Owner: ownerA, Config: c, Container: &Container{V4: podA, V6: podA6}}
	keys := r.delKeys()
	var sets []string
	for _, k := range keys {
		sets = append(sets, k.Set())
	}
	if fmt.Sprint(sets) != "[dnat4 dnat6 snat4 snat6]" {
		t.Errorf("sets %v: want both families' DNAT, and SNAT though the config has it off", sets)
	}
	if c.SNAT {
		t.Error("delKeys changed the request's configuration")
	}
	for _, r := range []*Request{
		{Owner: ownerA, Config: c, Sweep: true, Container: &Container{V4: podA}},
		{Owner: ownerA, Config: c},
		{Owner: ownerA, Config: c, Container: &Container{}},
		{Owner: ownerA, Config: &Config{Mappings: []Mapping{{Proto: TCP, HostPort: 80, HostIP: podA6}}}, Container: &Container{V4: podA}},
	} {
		if keys := r.delKeys(); keys != nil {
			t.Errorf("%+v: keys %v, want none (list instead)", r, keys)
		}
	}
}
