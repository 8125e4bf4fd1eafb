package dataplane

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/dataplane/tag"
	"github.com/podnet/podnet/netns"
)

func TestClosedComment(t *testing.T) {
	o := tag.Owner{Network: "podnet", ContainerID: strings.Repeat("c", 64), IfName: "eth0"}
	if ref := ClosedPodRef(o, "x", "db"); ref != "x/db" {
		t.Errorf("short ref %q", ref)
	}
	long := strings.Repeat("p", 253)
	ref := ClosedPodRef(o, "x", long)
	if ref != HashedPodRef("x/"+long) || !strings.HasPrefix(ref, "sha256:") {
		t.Errorf("long ref %q", ref)
	}
	p := ClosedPod{Pod: ref, Owner: o}
	if len(p.comment()) > closedCommentMax {
		t.Errorf("comment of %d bytes", len(p.comment()))
	}
	pod, owner, ok := parseClosedComment(p.comment())
	if !ok || pod != ref || owner != o {
		t.Errorf("round trip: %q %+v %v", pod, owner, ok)
	}
	for _, bad := range []string{"", "x/db", "x/db a b", " a b c"} {
		if _, _, ok := parseClosedComment(bad); ok {
			t.Errorf("comment %q accepted", bad)
		}
	}
}

// TestClosedPods: a closed address gets no packet from the node, Open
// removes only the elements that still name the pod it was given, DEL's
// removal is by owner and idempotent, and the table goes whole.
func TestClosedPods(t *testing.T) {
	path := newNS(t)
	lock := filepath.Join(t.TempDir(), "closed.lock")
	var c *Closed
	if err := netns.Do(path, func() (err error) { c, err = NewClosed(lock, 0); return err }); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h := handleIn(t, path)
	lo, err := h.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		t.Fatal(err)
	}
	podA := netip.MustParseAddr("10.9.0.1")
	if err := AddAddr(h, lo.Attrs().Index, netip.PrefixFrom(podA, 32)); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ownerA := tag.Owner{Network: "n", ContainerID: "a", IfName: "eth0"}
	ownerB := tag.Owner{Network: "n", ContainerID: "b", IfName: "eth0"}
	a := ClosedPod{Pod: "x/a", Owner: ownerA, Addrs: []netip.Addr{podA, netip.MustParseAddr("fd00::1")}}
	b := ClosedPod{Pod: "x/b", Owner: ownerB, Addrs: []netip.Addr{netip.MustParseAddr("10.9.0.2")}}

	if got, err := c.List(); err != nil || len(got) != 0 {
		t.Fatalf("List without a table: %v, %v", got, err)
	}
	if !udpArrives(t, path, podA) {
		t.Fatal("no datagram to an open address: the probe is broken")
	}
	for _, p := range []ClosedPod{a, b, a} { // Add twice: the same
		if err := c.Add(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.List()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, []ClosedPod{a, b}) && !reflect.DeepEqual(got, []ClosedPod{b, a}) {
		t.Errorf("List = %+v, want a and b", got)
	}
	if udpArrives(t, path, podA) {
		t.Error("a datagram reached a closed address")
	}

	// Open with another owner (the address closed again for another
	// sandbox since) removes nothing.
	if opened, err := c.Open(ctx, ClosedPod{Pod: "x/a", Owner: ownerB, Addrs: a.Addrs}); err != nil || opened {
		t.Errorf("Open with another owner: %v, %v", opened, err)
	}
	if opened, err := c.Open(ctx, a); err != nil || !opened {
		t.Errorf("Open: %v, %v", opened, err)
	}
	if !udpArrives(t, path, podA) {
		t.Error("no datagram to an address opened again")
	}
	if opened, err := c.Open(ctx, a); err != nil || opened {
		t.Errorf("second Open: %v, %v", opened, err)
	}

	if err := c.Add(ctx, a); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := c.RemoveOwned(ownerA); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := c.List(); err != nil || !reflect.DeepEqual(got, []ClosedPod{b}) {
		t.Errorf("after RemoveOwned(a): %+v, %v; want b alone", got, err)
	}
	for range 2 {
		if err := c.RemoveTable(); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := c.List(); err != nil || len(got) != 0 {
		t.Errorf("after RemoveTable: %+v, %v", got, err)
	}
	if err := c.RemoveOwned(ownerB); err != nil {
		t.Errorf("RemoveOwned without a table: %v", err)
	}
}

// udpArrives sends a datagram from the namespace's loopback address to
// dst in it (output, then input hook) and reports whether it arrived.
func udpArrives(t *testing.T, path string, dst netip.Addr) bool {
	t.Helper()
	var got bool
	err := netns.Do(path, func() error {
		l, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 0)))
		if err != nil {
			return err
		}
		defer l.Close()
		c, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")), l.LocalAddr().(*net.UDPAddr))
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.Write([]byte("x")); err != nil {
			if errors.Is(err, unix.EPERM) {
				return nil // dropped on output
			}
			return err
		}
		_ = l.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		var b [8]byte
		_, _, err = l.ReadFromUDP(b[:])
		got = err == nil
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}
