package policyrules

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/podnet/podnet/dataplane/nflog"
	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/policy"
)

// logReader collects the records of one NFLOG group of a namespace.
type logReader struct {
	mu   sync.Mutex
	recs []nflog.Record
	done chan struct{}
	conn *nflog.Conn
}

func readLog(t *testing.T, path string, group uint16) *logReader {
	t.Helper()
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	c, err := nflog.Listen(group, nflog.WithNetNSFd(int(f.Fd())))
	must(t, err)
	lr := &logReader{done: make(chan struct{}), conn: c}
	go func() {
		defer close(lr.done)
		for {
			recs, err := c.Receive()
			if errors.Is(err, nflog.ErrLost) {
				continue
			}
			if err != nil {
				return
			}
			lr.mu.Lock()
			lr.recs = append(lr.recs, recs...)
			lr.mu.Unlock()
		}
	}()
	t.Cleanup(lr.close)
	return lr
}

func (lr *logReader) close() {
	lr.conn.Close()
	<-lr.done
}

// matching returns the records of packets from src to dst port.
func (lr *logReader) matching(src, dst netip.Addr, port uint16) []nflog.Record {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	var out []nflog.Record
	for _, r := range lr.recs {
		if r.Src == src && r.Dst == dst && r.DstPort == port {
			out = append(out, r)
		}
	}
	return out
}

func (lr *logReader) all() []nflog.Record {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return append([]nflog.Record(nil), lr.recs...)
}

// TestDenyLog: with the deny log on, a denied packet gives one record
// naming the pod and the direction that denied it, with its addresses,
// protocol and port; allowed packets give none; the node's rate limit
// holds under a flood; and the listener's group is free again once it
// is closed.
func TestDenyLog(t *testing.T) {
	tp := newTopology(t, fixedPods)
	s := fixedCluster(tp)
	f, err := os.Open(tp.node)
	must(t, err)
	defer f.Close()
	const group = 7371
	dl := DenyLog{Group: group, Rate: 5, Burst: 5}
	r, err := New("n1", WithNetNSFd(int(f.Fd())), WithDenyLog(dl))
	must(t, err)
	defer r.Close()
	lr := readLog(t, tp.node, group)
	if _, err := nflog.Listen(group, nflog.WithNetNSFd(int(f.Fd()))); err == nil {
		t.Fatal("a second listener bound the group another socket holds")
	}
	ir := policy.Compile(s, policy.Options{Node: "n1"})
	if _, err := r.Apply(ir); err != nil {
		t.Fatal(err)
	}
	a, b, c, d := tp.pods[0], tp.pods[1], tp.pods[2], tp.pods[3]
	T := policy.TCP
	checkProbes(t, tp, s, []probeCase{
		{a.v4, b.v4, T, 81, true},   // web -> db 81
		{c.v4, a.v4, T, 80, true},   // client -> web's http
		{d.v4, a.v4, T, 80, true},   // nothing isolates these
		{d.v4, b.v4, T, 81, false},  // db's ingress denies
		{d.v6, b.v6, T, 81, false},  //
		{c.v4, b.v4, T, 81, false},  // client's egress denies
		{c.v4, n2IP4, T, 80, false}, // outside client's block
	})
	type want struct {
		src, dst netip.Addr
		port     uint16
		pod      policy.PodKey
		dir      Direction
	}
	for _, w := range []want{
		{d.v4, b.v4, 81, b.key, Ingress},
		{d.v6, b.v6, 81, b.key, Ingress},
		{c.v4, b.v4, 81, c.key, Egress},
		{c.v4, n2IP4, 80, c.key, Egress},
	} {
		var got []nflog.Record
		deadline := time.Now().Add(2 * time.Second)
		for len(got) == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			got = lr.matching(w.src, w.dst, w.port)
		}
		if len(got) == 0 {
			t.Errorf("no record of the denied %s -> %s:%d; records %+v", w.src, w.dst, w.port, lr.all())
			continue
		}
		pod, dir, ok := ParseLogPrefix(got[0].Prefix)
		if !ok || pod != w.pod || dir != w.dir || got[0].Protocol != 6 {
			t.Errorf("record of %s -> %s:%d: %+v (prefix: %s %s %v), want %s %s TCP", w.src, w.dst, w.port, got[0], pod, dir, ok, w.pod, w.dir)
		}
	}
	// Nothing from the allowed connections, replies included.
	for _, rec := range lr.all() {
		if rec.Src == a.v4 || rec.Dst == a.v4 || (rec.Src == d.v4 && rec.Dst != b.v4) {
			t.Errorf("a record of an allowed connection: %+v", rec)
		}
	}

	// The flood: the limit is the node's (one object for every chain), a
	// resync starts it full. The kernel's packet limit lets Burst through
	// at once, then Rate a second.
	if _, err := r.Resync(ir); err != nil {
		t.Fatal(err)
	}
	const flood = 300
	start := time.Now()
	must(t, netns.Do(d.path, func() error {
		conn, err := net.DialUDP("udp", &net.UDPAddr{IP: d.v4.AsSlice()}, &net.UDPAddr{IP: b.v4.AsSlice(), Port: 53})
		if err != nil {
			return err
		}
		defer conn.Close()
		// One flow: nothing let its first packet through, so conntrack
		// never calls it established and every packet is judged.
		for range flood {
			if _, err := conn.Write([]byte("flood")); err != nil {
				return err
			}
		}
		return nil
	}))
	// And other pods' denials share the budget.
	must(t, netns.Do(c.path, func() error {
		conn, err := net.DialUDP("udp", &net.UDPAddr{IP: c.v4.AsSlice()}, &net.UDPAddr{IP: n2IP4.AsSlice(), Port: 80})
		if err != nil {
			return err
		}
		defer conn.Close()
		for range flood {
			if _, err := conn.Write([]byte("flood")); err != nil {
				return err
			}
		}
		return nil
	}))
	elapsed := time.Since(start)
	time.Sleep(500 * time.Millisecond)
	got := len(lr.matching(d.v4, b.v4, 53)) + len(lr.matching(c.v4, n2IP4, 80))
	most := int(dl.Burst) + int(float64(dl.Rate)*(elapsed.Seconds()+0.5)) + 1
	t.Logf("%d packets denied in %v, %d logged (at most %d allowed by the limit)", 2*flood, elapsed, got, most)
	if got < int(dl.Burst) || got > most {
		t.Errorf("the flood logged %d records, want %d to %d", got, dl.Burst, most)
	}

	// Nothing stays: the group is free once its listener is closed, and
	// Remove takes the table with its limit.
	lr.close()
	again, err := nflog.Listen(group, nflog.WithNetNSFd(int(f.Fd())))
	if err != nil {
		t.Fatalf("the group is still held after Close: %v", err)
	}
	again.Close()
	must(t, r.Remove())
	if tableExists(t, tp.node) {
		t.Fatal("table left after Remove")
	}
}
