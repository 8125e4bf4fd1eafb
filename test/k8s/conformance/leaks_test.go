package conformance

import (
	"os/exec"
	"testing"

	"github.com/podnet/podnet/internal/testutil"
)

func TestParseLeaks(t *testing.T) {
	out := `table bridge podnet_conformance_leaks {
	counter outside_ipv4 {
		packets 0 bytes 0
	}

	counter outside_ipv6 {
		packets 2 bytes 140
	}

	counter outside_arp {
		packets 7 bytes 294
	}
}`
	l, err := parseLeaks([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if l.IPv4 != 0 || l.IPv6 != 2 || l.ARP != 7 || l.Total() != 9 || l.Seen != out {
		t.Fatalf("got %+v", l)
	}
	if _, err := parseLeaks([]byte("table bridge x {}")); err == nil {
		t.Fatal("a table without the counters parsed")
	}
}

// TestWatchLeaks installs the counters in a namespace of its own and
// reads them back: nft accepts the rules as written. Needs root.
func TestWatchLeaks(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("nft"); err != nil {
		t.Fatalf("nft (make deps installs it): %v", err)
	}
	name, _ := testutil.NewNetNS(t)
	if err := WatchLeaks(name); err != nil {
		t.Fatal(err)
	}
	l, err := ReadLeaks(name)
	if err != nil {
		t.Fatal(err)
	}
	if l.Total() != 0 {
		t.Fatalf("fresh counters: %v", l)
	}
}
