package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/portmap"
)

func tcp(host, ctr int) portmap.RuntimeMapping {
	return portmap.RuntimeMapping{HostPort: host, ContainerPort: ctr, Protocol: "tcp"}
}

func udp(host, ctr int) portmap.RuntimeMapping {
	return portmap.RuntimeMapping{HostPort: host, ContainerPort: ctr, Protocol: "udp"}
}

// TestConnectivity publishes a TCP and a UDP port of one pod and
// reaches them every way a host port is reached.
func TestConnectivity(t *testing.T) {
	tp := newTopo(t)
	p := tp.addPod(1, true)
	serveTCP(t, p.ns, ":8080")
	serveUDP(t, p.ns, ":5353")
	conf := p.conf(t, []portmap.RuntimeMapping{tcp(18080, 8080), udp(15353, 5353)}, true)

	out := tp.mustExec("ADD", p, conf)
	var res cni.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.IPs) != 2 {
		t.Fatalf("ADD result %s (%v): want prevResult passed on", out, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("ruleset:\n%s", tp.nftList())
		}
	})

	tests := []struct {
		name, ns, addr string
		udp            bool
		from           string // prefix of the source address the pod must see; "" for any
	}{
		{name: "host to host address", ns: tp.host, addr: hostAddr + ":18080", from: hostAddr},
		{name: "host to 127.0.0.1", ns: tp.host, addr: "127.0.0.1:18080", from: "10.101.0.254"},
		{name: "outside to host address", ns: tp.ext, addr: hostAddr + ":18080", from: extAddr},
		{name: "hairpin", ns: p.ns, addr: hostAddr + ":18080", from: "10.101.0.254"},
		{name: "host to host address over IPv6", ns: tp.host, addr: "[fd00:101::fe]:18080"},
		{name: "hairpin over IPv6", ns: p.ns, addr: "[fd00:101::fe]:18080", from: "[fd00:101::fe]"},
		{name: "udp from outside", ns: tp.ext, addr: hostAddr + ":15353", udp: true, from: extAddr},
		{name: "udp from host", ns: tp.host, addr: hostAddr + ":15353", udp: true},
		{name: "udp hairpin", ns: p.ns, addr: hostAddr + ":15353", udp: true, from: "10.101.0.254"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dial := dialTCP
			if tt.udp {
				dial = dialUDP
			}
			got, err := dial(tt.ns, tt.addr)
			if err != nil {
				t.Fatalf("dial %s: %v", tt.addr, err)
			}
			if !strings.HasPrefix(got, "hello "+tt.from) {
				t.Fatalf("answer %q, want one from the pod seeing source %s", got, tt.from)
			}
		})
	}

	if _, err := tp.exec("CHECK", p, conf); err != nil {
		t.Fatalf("CHECK: %v", err)
	}

	tp.mustExec("DEL", p, conf)
	if got := tp.owned(p); len(got) != 0 {
		t.Fatalf("after DEL the table still holds %v", got)
	}
	if _, err := dialTCP(tp.ext, hostAddr+":18080"); err == nil {
		t.Fatal("host port still answers after DEL")
	}
	if _, err := tp.exec("CHECK", p, conf); err == nil {
		t.Fatal("CHECK after DEL succeeded")
	}
}

// TestHostIP restricts a mapping to one host address: the port answers
// there and not on the host's other addresses.
func TestHostIP(t *testing.T) {
	tp := newTopo(t)
	p := tp.addPod(1, false)
	serveTCP(t, p.ns, ":80")
	m := tcp(18081, 80)
	m.HostIP = hostAddr
	conf := p.conf(t, []portmap.RuntimeMapping{m}, true)
	tp.mustExec("ADD", p, conf)
	if _, err := dialTCP(tp.ext, hostAddr+":18081"); err != nil {
		t.Fatalf("dial the mapped address: %v", err)
	}
	if _, err := dialTCP(tp.host, "10.101.0.254:18081"); err == nil {
		t.Fatal("the port answers on an address it is not mapped on")
	}
	tp.mustExec("DEL", p, conf)
}

// TestConflict: a host port held by one pod is refused to another,
// naming the holder; the holder keeps it, and the loser's DEL (which a
// runtime sends after a failed ADD) does not take it away.
func TestConflict(t *testing.T) {
	tp := newTopo(t)
	a, b := tp.addPod(1, false), tp.addPod(2, false)
	serveTCP(t, a.ns, ":80")
	tp.mustExec("ADD", a, a.conf(t, []portmap.RuntimeMapping{tcp(18082, 80)}, true))

	tests := []struct {
		name string
		m    portmap.RuntimeMapping
	}{
		{"same port", tcp(18082, 81)},
		{"same port on the host address", portmap.RuntimeMapping{HostPort: 18082, ContainerPort: 80, Protocol: "tcp", HostIP: hostAddr}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			confB := b.conf(t, []portmap.RuntimeMapping{tt.m}, true)
			_, err := tp.exec("ADD", b, confB)
			if !cni.IsCode(err, cni.CodeAddressConflict) {
				t.Fatalf("ADD of a taken port: %v, want code %d", err, cni.CodeAddressConflict)
			}
			if msg := err.Error(); !strings.Contains(msg, "tcp/18082") || !strings.Contains(msg, a.id) {
				t.Errorf("error %q does not name the port and the holder", msg)
			}
			tp.mustExec("DEL", b, confB)
			if got, err := dialTCP(tp.ext, hostAddr+":18082"); err != nil || !strings.HasPrefix(got, "hello") {
				t.Fatalf("the holder lost its port: %q %v", got, err)
			}
		})
	}
	// Another protocol on the same number is another port.
	tp.mustExec("ADD", b, b.conf(t, []portmap.RuntimeMapping{udp(18082, 80)}, true))
}

// TestIdempotent: ADD twice, DEL twice, DEL without prevResult, and DEL
// when there is no table at all.
func TestIdempotent(t *testing.T) {
	tp := newTopo(t)
	p := tp.addPod(1, false)
	serveTCP(t, p.ns, ":80")
	conf := p.conf(t, []portmap.RuntimeMapping{tcp(18083, 80)}, true)

	tp.mustExec("DEL", p, conf) // nothing yet: no table
	tp.mustExec("ADD", p, conf)
	first := tp.owned(p)
	tp.mustExec("ADD", p, conf)
	if got := tp.owned(p); len(got) != len(first) || len(got) != 2 {
		t.Fatalf("after a second ADD %v, after the first %v", got, first)
	}
	if _, err := dialTCP(tp.ext, hostAddr+":18083"); err != nil {
		t.Fatal(err)
	}
	// An ADD with other mappings adds them. It reads the table by the
	// keys it wants, so the old mapping stays until a DEL or GC finds it
	// (runtimes DEL before they ADD again): here the DEL without
	// prevResult, which looks for the owner's elements everywhere.
	conf2 := p.conf(t, []portmap.RuntimeMapping{tcp(18084, 80)}, true)
	tp.mustExec("ADD", p, conf2)
	if _, err := dialTCP(tp.ext, hostAddr+":18084"); err != nil {
		t.Fatal(err)
	}
	if got := tp.owned(p); len(got) != 3 {
		t.Fatalf("after an ADD with another mapping: %v, want both mappings and the SNAT element", got)
	}
	tp.mustExec("DEL", p, p.conf(t, []portmap.RuntimeMapping{tcp(18084, 80)}, false))
	tp.mustExec("DEL", p, conf2)
	if got := tp.owned(p); len(got) != 0 {
		t.Fatalf("after DEL: %v", got)
	}
}

// TestNoMappings: nothing at all happens without mappings.
func TestNoMappings(t *testing.T) {
	tp := newTopo(t)
	p := tp.addPod(1, false)
	conf := p.conf(t, nil, true)
	tp.mustExec("ADD", p, conf)
	tp.mustExec("CHECK", p, conf)
	tp.mustExec("DEL", p, conf)
	if _, exists := tp.entries(); exists {
		t.Fatal("a table was created for a pod without mappings")
	}
}

// TestGC keeps the valid attachments' elements, drops the others', and
// drops the table once nothing is left.
func TestGC(t *testing.T) {
	tp := newTopo(t)
	a, b := tp.addPod(1, false), tp.addPod(2, false)
	tp.mustExec("ADD", a, a.conf(t, []portmap.RuntimeMapping{tcp(18085, 80)}, true))
	tp.mustExec("ADD", b, b.conf(t, []portmap.RuntimeMapping{udp(18086, 53)}, true))

	tp.gc(a)
	if got := tp.owned(b); len(got) != 0 {
		t.Fatalf("GC left an invalid attachment's elements: %v", got)
	}
	if got := tp.owned(a); len(got) != 2 {
		t.Fatalf("GC took a valid attachment's elements: %v", got)
	}
	tp.gc()
	if es, exists := tp.entries(); exists || len(es) != 0 {
		t.Fatalf("after GC with nothing valid: table exists %v, elements %v", exists, es)
	}
}

// TestBadConfig: mistakes in mappings are code 7 and name the field.
func TestBadConfig(t *testing.T) {
	tp := newTopo(t)
	p := tp.addPod(1, false)
	tests := []struct {
		m     portmap.RuntimeMapping
		field string
	}{
		{portmap.RuntimeMapping{HostPort: 0, ContainerPort: 80}, "hostPort"},
		{portmap.RuntimeMapping{HostPort: 70000, ContainerPort: 80}, "hostPort"},
		{portmap.RuntimeMapping{HostPort: 80, ContainerPort: 80, Protocol: "icmp"}, "protocol"},
		{portmap.RuntimeMapping{HostPort: 80, ContainerPort: 80, HostIP: "nope"}, "hostIP"},
		{portmap.RuntimeMapping{HostPort: 80, ContainerPort: 80, HostIP: "fd00::1"}, "hostIP"}, // pod has no IPv6
	}
	for _, tt := range tests {
		_, err := tp.exec("ADD", p, p.conf(t, []portmap.RuntimeMapping{tt.m}, true))
		if !cni.IsCode(err, cni.CodeInvalidNetworkConfig) || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("%+v: %v, want code 7 naming %s", tt.m, err, tt.field)
		}
	}
}

// TestUDPConntrack: a UDP flow that reached the host port before the
// mapping existed is redirected by ADD, and one that was mapped stops
// reaching the pod after DEL: both flush the port's conntrack entries,
// which would otherwise keep the old destination.
func TestUDPConntrack(t *testing.T) {
	tp := newTopo(t)
	p := tp.addPod(1, false)
	serveUDP(t, p.ns, ":53")
	conf := p.conf(t, []portmap.RuntimeMapping{udp(15354, 53)}, true)
	from, to := extAddr+":40000", hostAddr+":15354"
	// With the table in place, the first packet gets a "no NAT" binding
	// that sticks to the flow; without a table it would not be bound yet.
	other := tp.addPod(2, false)
	tp.mustExec("ADD", other, other.conf(t, []portmap.RuntimeMapping{tcp(18088, 80)}, true))

	if _, err := dialUDPFrom(tp.ext, from, to); err == nil {
		t.Fatal("answer before ADD")
	}
	tp.mustExec("ADD", p, conf)
	if got, err := dialUDPFrom(tp.ext, from, to); err != nil || !strings.HasPrefix(got, "hello") {
		t.Fatalf("the flow that existed before ADD: %q %v", got, err)
	}
	tp.mustExec("DEL", p, conf)
	if got, err := dialUDPFrom(tp.ext, from, to); err == nil {
		t.Fatalf("the flow still reaches the pod after DEL: %q", got)
	}
}

// TestDelBadConfig: a DEL whose mappings do not validate still removes
// the attachment's elements.
func TestDelBadConfig(t *testing.T) {
	tp := newTopo(t)
	p := tp.addPod(1, false)
	tp.mustExec("ADD", p, p.conf(t, []portmap.RuntimeMapping{tcp(18087, 80)}, true))
	tp.mustExec("DEL", p, p.conf(t, []portmap.RuntimeMapping{tcp(0, 80)}, false))
	if got := tp.owned(p); len(got) != 0 {
		t.Fatalf("after DEL: %v", got)
	}
}

// TestDelWithoutMappings: a DEL without runtimeConfig.portMappings (a
// runtime given no capability arguments, as podnet pod del without
// CAP_ARGS) still removes the attachment's elements, found by their
// owner, and no other attachment's. Left behind, they would DNAT the
// host port to an address the IPAM later gives another pod. Repeated,
// and with the table gone, it succeeds and creates nothing.
func TestDelWithoutMappings(t *testing.T) {
	for _, withPrev := range []bool{false, true} {
		t.Run(fmt.Sprint("prevResult=", withPrev), func(t *testing.T) {
			tp := newTopo(t)
			p, other := tp.addPod(1, true), tp.addPod(2, false)
			serveTCP(t, p.ns, ":80")
			tp.mustExec("ADD", p, p.conf(t, []portmap.RuntimeMapping{tcp(18089, 80)}, true))
			tp.mustExec("ADD", other, other.conf(t, []portmap.RuntimeMapping{udp(18089, 53)}, true))
			if got := tp.owned(p); len(got) != 4 {
				t.Fatalf("after ADD the pod has %v, want dnat4, dnat6, snat4 and snat6 elements", got)
			}
			if _, err := dialTCP(tp.ext, hostAddr+":18089"); err != nil {
				t.Fatalf("host port after ADD: %v", err)
			}
			keep := fmt.Sprint(tp.owned(other))

			del := p.confNoCapArgs(t, withPrev)
			tp.mustExec("DEL", p, del)
			if got := tp.owned(p); len(got) != 0 {
				t.Fatalf("after a DEL without portMappings the table still holds %v", got)
			}
			if got := fmt.Sprint(tp.owned(other)); got != keep {
				t.Fatalf("the DEL took another pod's elements: %s, was %s", got, keep)
			}
			if _, err := dialTCP(tp.ext, hostAddr+":18089"); err == nil {
				t.Fatal("host port still answers after DEL")
			}

			tp.mustExec("DEL", p, del)
			tp.dropTable()
			tp.mustExec("DEL", p, del)
			if es, exists := tp.entries(); exists {
				t.Fatalf("a DEL without portMappings created the table: %v", es)
			}
		})
	}
}
