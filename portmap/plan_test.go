package portmap

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/podnet/podnet/dataplane/tag"
)

var (
	ownerA = tag.Owner{Network: "net", ContainerID: "a", IfName: "eth0"}
	ownerB = tag.Owner{Network: "net", ContainerID: "b", IfName: "eth0"}
	podA   = netip.MustParseAddr("10.1.0.2")
	podB   = netip.MustParseAddr("10.1.0.3")
	podA6  = netip.MustParseAddr("fd00::2")
	host   = netip.MustParseAddr("198.18.0.1")
)

func TestValidateMappings(t *testing.T) {
	tests := []struct {
		in   []RuntimeMapping
		want string // error substring; "" for success
	}{
		{[]RuntimeMapping{{HostPort: 80, ContainerPort: 8080}}, ""},
		{[]RuntimeMapping{{HostPort: 80, ContainerPort: 8080, Protocol: "UDP", HostIP: "::ffff:1.2.3.4"}}, ""},
		{[]RuntimeMapping{{HostPort: 0, ContainerPort: 1}}, "portMappings[0].hostPort"},
		{[]RuntimeMapping{{HostPort: 65536, ContainerPort: 1}}, "portMappings[0].hostPort"},
		{[]RuntimeMapping{{HostPort: 1, ContainerPort: -1}}, "portMappings[0].containerPort"},
		{[]RuntimeMapping{{HostPort: 1, ContainerPort: 1, Protocol: "icmp"}}, "portMappings[0].protocol"},
		{[]RuntimeMapping{{HostPort: 1, ContainerPort: 1, HostIP: "x"}}, "portMappings[0].hostIP"},
		{[]RuntimeMapping{{HostPort: 1, ContainerPort: 1, HostIP: "fe80::1%eth0"}}, "portMappings[0].hostIP"},
		{[]RuntimeMapping{{HostPort: 1, ContainerPort: 1}, {HostPort: 1, ContainerPort: 2, Protocol: "tcp"}}, "portMappings[1].hostPort"},
		{[]RuntimeMapping{{HostPort: 1, ContainerPort: 1}, {HostPort: 1, ContainerPort: 2, Protocol: "udp"}}, ""},
	}
	for _, tt := range tests {
		ms, err := ValidateMappings(tt.in)
		if tt.want == "" {
			if err != nil || len(ms) != len(tt.in) {
				t.Errorf("%+v: %v", tt.in, err)
			}
			continue
		}
		if !errors.Is(err, &Error{Kind: KindInvalid}) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: error %v, want KindInvalid naming %s", tt.in, err, tt.want)
		}
	}
	ms, _ := ValidateMappings([]RuntimeMapping{{HostPort: 1, ContainerPort: 1, HostIP: "::ffff:1.2.3.4"}})
	if !ms[0].HostIP.Is4() {
		t.Errorf("a v4-mapped hostIP is not treated as IPv4: %v", ms[0].HostIP)
	}
}

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`{"runtimeConfig":{"portMappings":[{"hostPort":80,"containerPort":8080,"protocol":"tcp"}]}}`))
	if err != nil || !c.SNAT || len(c.Mappings) != 1 || !c.MappingsGiven {
		t.Fatalf("%+v %v", c, err)
	}
	c, err = ParseConfig([]byte(`{"snat":false}`))
	if err != nil || c.SNAT || len(c.Mappings) != 0 || c.MappingsGiven {
		t.Fatalf("%+v %v", c, err)
	}
	// An empty list is given (ADD published nothing); no list, or null,
	// is not (a DEL must then look for the attachment's elements).
	for stdin, given := range map[string]bool{
		`{"runtimeConfig":{"portMappings":[]}}`:   true,
		`{"runtimeConfig":{"portMappings":null}}`: false,
		`{"runtimeConfig":{"bandwidth":{}}}`:      false,
	} {
		c, err := ParseConfig([]byte(stdin))
		if err != nil || len(c.Mappings) != 0 || c.MappingsGiven != given {
			t.Errorf("%s: %+v %v, want MappingsGiven %v", stdin, c, err, given)
		}
	}
	if _, err := ParseConfig([]byte(`{"runtimeConfig":{"portMappings":[{"hostPort":"80"}]}}`)); !errors.Is(err, &Error{Kind: KindInvalid}) {
		t.Fatalf("hostPort as a string: %v", err)
	}
}

func TestEntryRoundTrip(t *testing.T) {
	for _, e := range []Entry{
		{Kind: DNAT, Proto: TCP, HostPort: 80, PodIP: podA, PodPort: 8080, Owner: ownerA},
		{Kind: DNAT, Proto: UDP, HostIP: host, HostPort: 53, PodIP: podA, PodPort: 5353, Owner: ownerA},
		{Kind: DNAT, Proto: SCTP, HostPort: 9, PodIP: podA6, PodPort: 9, Owner: ownerA},
		{Kind: DNAT, Proto: TCP, HostIP: netip.MustParseAddr("fd00::1"), HostPort: 65535, PodIP: podA6, PodPort: 1, Owner: ownerA},
		{Kind: SNAT, PodIP: podA, Owner: ownerA},
		{Kind: SNAT, PodIP: podA6, Owner: ownerA},
	} {
		got, err := DecodeEntry(e.Set(), e.Key(), e.Value(), e.Owner.String())
		if err != nil || got != e {
			t.Errorf("%v: decoded %v, %v", e, got, err)
		}
		// Key and data lengths are those of the set types.
		rs := NewRuleset()
		s := rs.Sets[e.Set()]
		if len(e.Key()) != int(s.KeyType.Bytes) || (s.IsMap && len(e.Value()) != int(s.DataType.Bytes)) {
			t.Errorf("%v: key %d bytes (set %d), data %d bytes (set %d)", e, len(e.Key()), s.KeyType.Bytes, len(e.Value()), s.DataType.Bytes)
		}
	}
	if e, err := DecodeEntry(SetSNAT4, Entry{Kind: SNAT, PodIP: podA}.Key(), nil, "no owner"); err != nil || e.Owner != (tag.Owner{}) {
		t.Errorf("a two-field comment: %v, %v; want an element of no owner", e, err)
	}
}

func TestWant(t *testing.T) {
	c := &Config{SNAT: true, Mappings: []Mapping{
		{Proto: TCP, HostPort: 80, ContainerPort: 8080},
		{Proto: UDP, HostIP: host, HostPort: 53, ContainerPort: 53},
		{Proto: TCP, HostIP: netip.IPv6Unspecified(), HostPort: 443, ContainerPort: 443},
	}}
	es, err := Want(ownerA, c, podA, podA6)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range es {
		got = append(got, e.String())
	}
	want := []string{
		"dnat4 tcp *:80 -> 10.1.0.2:8080 (net a eth0)",
		"dnat6 tcp *:80 -> [fd00::2]:8080 (net a eth0)",
		"hostip4 udp 198.18.0.1:53 -> 10.1.0.2:53 (net a eth0)",
		"dnat6 tcp *:443 -> [fd00::2]:443 (net a eth0)",
		"snat4 10.1.0.2 (net a eth0)",
		"snat6 fd00::2 (net a eth0)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := Want(ownerA, c, podA, netip.Addr{}); !errors.Is(err, &Error{Kind: KindInvalid}) {
		t.Fatalf("a :: mapping for a pod without IPv6: %v", err)
	}
	if _, err := Want(ownerA, c, netip.Addr{}, netip.Addr{}); !errors.Is(err, &Error{Kind: KindInvalid}) {
		t.Fatalf("no pod address: %v", err)
	}
	es, _ = Want(ownerA, &Config{Mappings: c.Mappings[:1]}, podA, netip.Addr{})
	if len(es) != 1 {
		t.Fatalf("without SNAT: %v", es)
	}
}

func dnat(o tag.Owner, hostIP netip.Addr, port uint16, pod netip.Addr, podPort uint16) Entry {
	return Entry{Kind: DNAT, Proto: TCP, HostIP: hostIP, HostPort: port, PodIP: pod, PodPort: podPort, Owner: o}
}

func TestReconcile(t *testing.T) {
	anyIP := netip.Addr{}
	tests := []struct {
		name         string
		want, exist  []Entry
		add, del     int
		conflictWith string
	}{
		{name: "empty table", want: []Entry{dnat(ownerA, anyIP, 80, podA, 80)}, add: 1},
		{name: "already there",
			want: []Entry{dnat(ownerA, anyIP, 80, podA, 80)}, exist: []Entry{dnat(ownerA, anyIP, 80, podA, 80)}},
		{name: "own element with other data",
			want: []Entry{dnat(ownerA, anyIP, 80, podA, 81)}, exist: []Entry{dnat(ownerA, anyIP, 80, podA, 80)}, add: 1, del: 1},
		{name: "own element no longer wanted",
			want: []Entry{dnat(ownerA, anyIP, 81, podA, 80)}, exist: []Entry{dnat(ownerA, anyIP, 80, podA, 80)}, add: 1, del: 1},
		{name: "taken by another container",
			want: []Entry{dnat(ownerA, anyIP, 80, podA, 80)}, exist: []Entry{dnat(ownerB, anyIP, 80, podB, 80)}, conflictWith: "b"},
		{name: "stale element of this address",
			want: []Entry{dnat(ownerA, anyIP, 80, podA, 80)}, exist: []Entry{dnat(ownerB, anyIP, 80, podA, 80)}, add: 1, del: 1},
		{name: "any address against a host address",
			want: []Entry{dnat(ownerA, anyIP, 80, podA, 80)}, exist: []Entry{dnat(ownerB, host, 80, podB, 80)}, conflictWith: "b"},
		{name: "host address against any address",
			want: []Entry{dnat(ownerA, host, 80, podA, 80)}, exist: []Entry{dnat(ownerB, anyIP, 80, podB, 80)}, conflictWith: "b"},
		{name: "two host addresses",
			want: []Entry{dnat(ownerA, host, 80, podA, 80)}, exist: []Entry{dnat(ownerB, netip.MustParseAddr("198.18.0.9"), 80, podB, 80)}, add: 1},
		{name: "other port",
			want: []Entry{dnat(ownerA, anyIP, 80, podA, 80)}, exist: []Entry{dnat(ownerB, anyIP, 81, podB, 80)}, add: 1},
		{name: "other protocol",
			want: []Entry{dnat(ownerA, anyIP, 80, podA, 80)}, exist: []Entry{{Kind: DNAT, Proto: UDP, HostPort: 80, PodIP: podB, PodPort: 80, Owner: ownerB}}, add: 1},
		{name: "other family",
			want: []Entry{dnat(ownerA, anyIP, 80, podA, 80)}, exist: []Entry{dnat(ownerB, anyIP, 80, podA6, 80)}, add: 1},
		{name: "snat element of a former holder of the address",
			want: []Entry{{Kind: SNAT, PodIP: podA, Owner: ownerA}}, exist: []Entry{{Kind: SNAT, PodIP: podA, Owner: ownerB}}, add: 1, del: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ch, err := Reconcile(ownerA, tt.want, tt.exist)
			if tt.conflictWith != "" {
				if !errors.Is(err, &Error{Kind: KindConflict}) || !strings.Contains(err.Error(), "container "+tt.conflictWith) {
					t.Fatalf("error %v, want a conflict naming container %s", err, tt.conflictWith)
				}
				return
			}
			if err != nil || len(ch.Add) != tt.add || len(ch.Del) != tt.del {
				t.Fatalf("add %v del %v err %v; want %d adds, %d deletions", ch.Add, ch.Del, err, tt.add, tt.del)
			}
		})
	}
}

func TestCollect(t *testing.T) {
	other := tag.Owner{Network: "other", ContainerID: "c", IfName: "eth0"}
	exist := []Entry{
		dnat(ownerA, netip.Addr{}, 80, podA, 80),
		dnat(ownerB, netip.Addr{}, 81, podB, 80),
		dnat(other, netip.Addr{}, 82, podB, 80),
		dnat(tag.Owner{}, netip.Addr{}, 83, podB, 80),
	}
	got := Collect("net", []tag.Owner{ownerA}, exist)
	if len(got) != 1 || got[0].Owner != ownerB {
		t.Fatalf("collected %v", got)
	}
	if m := Missing([]Entry{exist[0], dnat(ownerA, netip.Addr{}, 84, podA, 80)}, exist); len(m) != 1 || m[0].HostPort != 84 {
		t.Fatalf("missing %v", m)
	}
}
