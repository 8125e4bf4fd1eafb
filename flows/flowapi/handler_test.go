package flowapi

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/podnet/podnet/flows"
)

var t0 = time.Date(2026, 11, 29, 5, 30, 0, 0, time.UTC)

func record(ns string, v flows.Verdict) flows.Record {
	return flows.Record{Time: t0, Node: "node-1", Event: flows.Start, Protocol: "TCP", Verdict: v,
		Src: flows.Endpoint{IP: netip.MustParseAddr("10.244.1.5"), Port: 40112, Namespace: ns, Pod: "web-1"},
		Dst: flows.Endpoint{IP: netip.MustParseAddr("10.244.2.7"), Port: 5432, Namespace: ns, Pod: "db-0"}}
}

func fill(r *flows.Ring, n int) {
	for i := range n {
		v := flows.Forwarded
		if i%2 == 1 {
			v = flows.DroppedPolicy
		}
		r.Add(record("shop", v))
	}
}

func get(t *testing.T, url string) (int, http.Header, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func TestHandlerList(t *testing.T) {
	ring := flows.NewRing(1200)
	fill(ring, 1500)
	srv := httptest.NewServer(Handler(ring, "node-1"))
	defer srv.Close()
	for _, tc := range []struct {
		query     string
		code      int
		lines     int
		firstSeq  uint64
		wantInErr string
	}{
		{"", 200, DefaultLimit, 501, ""},
		{"?limit=5", 200, 5, 1496, ""},
		{"?limit=100000", 200, 1200, 301, ""},
		{"?limit=0", 200, 0, 0, ""},
		{"?verdict=dropped&limit=2", 200, 2, 1498, ""},
		{"?namespace=nowhere", 200, 0, 0, ""},
		{"?pod=web-1&namespace=shop&limit=1", 200, 1, 1500, ""},
		{"?verdict=denied", 400, 0, 0, `verdict "denied": want forwarded`},
		{"?limit=-1", 400, 0, 0, `limit "-1": want a number of records, 0 to 1200`},
		{"?follow=maybe", 400, 0, 0, `follow "maybe": want true or false`},
		{"?verdicts=dropped", 400, 0, 0, `parameter "verdicts": unknown: want namespace, pod`},
		{"?port=99999", 400, 0, 0, `port "99999"`},
	} {
		code, hd, body := get(t, srv.URL+Path+tc.query)
		if code != tc.code {
			t.Errorf("%s: %d %s", tc.query, code, body)
			continue
		}
		if tc.code != 200 {
			if !strings.Contains(body, tc.wantInErr) {
				t.Errorf("%s: %q, want %q", tc.query, body, tc.wantInErr)
			}
			continue
		}
		var lines []string
		if body != "" {
			lines = strings.Split(strings.TrimSuffix(body, "\n"), "\n")
		}
		if len(lines) != tc.lines || hd.Get(SnapshotHeader) != itoa(tc.lines) || hd.Get(NodeHeader) != "node-1" ||
			hd.Get("Content-Type") != "application/x-ndjson" {
			t.Errorf("%s: %d lines, headers %v", tc.query, len(lines), hd)
			continue
		}
		if tc.lines > 0 {
			var rec flows.Record
			if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil || rec.Seq != tc.firstSeq {
				t.Errorf("%s: first line %s (%v), want seq %d", tc.query, lines[0], err, tc.firstSeq)
			}
		}
	}
	resp, err := http.Post(srv.URL+Path, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", resp.StatusCode)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// waitFor polls cond for up to 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFollowDisconnect: a follower gets the snapshot, then the live
// records its filter selects, each as it comes; when it goes, the agent
// keeps no subscription and no goroutine of it.
func TestFollowDisconnect(t *testing.T) {
	ring := flows.NewRing(64)
	fill(ring, 10)
	srv := httptest.NewServer(Handler(ring, "node-1"))
	defer srv.Close()
	before := runtime.NumGoroutine()
	c := &Client{URL: srv.URL, Timeout: 5 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := c.Open(ctx, Query{Filter: flows.Filter{Verdicts: []flows.Verdict{flows.DroppedPolicy}}, Limit: 3, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	if s.Snapshot != 3 || s.Node != "node-1" {
		t.Errorf("snapshot %d, node %q", s.Snapshot, s.Node)
	}
	var got []uint64
	for range 3 {
		rec, err := s.Next()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, rec.Seq)
	}
	for i := range 4 {
		ring.Add(record("shop", flows.Forwarded))
		ring.Add(record("shop", flows.DroppedPolicy))
		// Each live record comes without waiting for more.
		rec, err := s.Next()
		if err != nil {
			t.Fatalf("live record %d: %v", i, err)
		}
		got = append(got, rec.Seq)
	}
	if want := "[6,8,10,12,14,16,18]"; jsonOf(got) != want {
		t.Errorf("seqs %v, want %s", got, want)
	}
	if n := ring.Stats().Subscribers; n != 1 {
		t.Errorf("%d subscriptions while following", n)
	}
	cancel()
	s.Close()
	waitFor(t, "the subscription to close", func() bool { return ring.Stats().Subscribers == 0 })
	srv.CloseClientConnections()
	http.DefaultClient.CloseIdleConnections()
	waitFor(t, "the handler's goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
}

func jsonOf(v any) string { b, _ := json.Marshal(v); return string(b) }

// TestFollowerThatNeverReads: a client that stops reading costs the agent
// its subscription buffer and the socket's, never more: the records
// beyond are dropped and counted, Add never waits, and the follow ends
// at the write deadline, leaving nothing.
func TestFollowerThatNeverReads(t *testing.T) {
	ring := flows.NewRing(64)
	h := Handler(ring, "node-1").(*handler)
	h.writeTimeout = 300 * time.Millisecond
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = smallSendBuffer{srv.Listener}
	srv.Start()
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A small receive buffer, so that the agent's writes soon block.
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	if _, err := io.WriteString(conn, "GET /flows?follow=true&limit=0 HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	status, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.Contains(status, "200") {
		t.Fatalf("status %q %v", status, err)
	}
	waitFor(t, "the subscription", func() bool { return ring.Stats().Subscribers == 1 })
	start := time.Now()
	const n = 50000
	for range n {
		ring.Add(record("shop", flows.Forwarded))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("%d records took %v with a stuck follower", n, d)
	}
	st := ring.Stats()
	// Dropped for it until the write deadline ended the follow.
	if st.Dropped == 0 {
		t.Errorf("none of %d dropped for a follower that does not read", n)
	}
	// The socket's buffers may hold what the follower was sent so far;
	// more records fill them, and the follow ends at its write deadline.
	waitFor(t, "the stuck follow to end at its write deadline", func() bool {
		for range 1000 {
			ring.Add(record("shop", flows.Forwarded))
		}
		return ring.Stats().Subscribers == 0
	})
}

func TestTooManyFollowers(t *testing.T) {
	ring := flows.NewRing(16)
	h := Handler(ring, "node-1").(*handler)
	h.slots = make(chan struct{}, 1)
	srv := httptest.NewServer(h)
	defer srv.Close()
	c := &Client{URL: srv.URL}
	s, err := c.Open(context.Background(), Query{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = c.Open(context.Background(), Query{Follow: true})
	if se, ok := err.(*StatusError); !ok || se.Code != http.StatusServiceUnavailable {
		t.Errorf("second follower: %v", err)
	}
	// A list is not a follower.
	if _, err := c.List(context.Background(), flows.Filter{}, 0); err != nil {
		t.Errorf("list beside a follower: %v", err)
	}
}

// smallSendBuffer makes the agent's socket buffers small, so that a
// client that does not read blocks its writes soon.
type smallSendBuffer struct{ net.Listener }

func (l smallSendBuffer) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}
