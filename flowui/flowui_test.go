package flowui

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/podnet/podnet/flows"
)

func TestLoopbackAddr(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "127.0.0.1:7380", want: "127.0.0.1:7380"},
		{in: "127.9.8.7:0", want: "127.9.8.7:0"},
		{in: "[::1]:7380", want: "[::1]:7380"},
		{in: "[::ffff:127.0.0.1]:80", want: "127.0.0.1:80"},
		{in: "0.0.0.0:7380", err: "0.0.0.0 is not a loopback address"},
		{in: ":7380", err: "no host"},
		{in: "[::]:7380", err: ":: is not a loopback address"},
		{in: "10.0.0.1:7380", err: "10.0.0.1 is not a loopback address"},
		{in: "localhost:7380", err: `host "localhost" is not an IP address`},
		{in: "127.0.0.1", err: "want host:port"},
		{in: "127.0.0.1:http", err: `port "http"`},
		{in: "[fe80::1%lo]:7380", err: "not a loopback address"},
	} {
		got, err := LoopbackAddr(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("LoopbackAddr(%q) = %v, %v; want error containing %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got.String() != tc.want {
			t.Errorf("LoopbackAddr(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

func TestLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1:7380": true, "localhost:7380": true, "LOCALHOST": true, "[::1]:80": true, "127.0.0.1": true,
		"evil.example:7380": false, "10.0.0.1:7380": false, "": false,
	} {
		if got := loopbackHost(host); got != want {
			t.Errorf("loopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}

func record(seq uint64, v flows.Verdict) flows.Record {
	return flows.Record{
		Time: time.Date(2026, 11, 29, 5, 30, 0, int(seq)*1e6, time.UTC), Node: "node-1", Event: flows.Start, Protocol: "TCP",
		Src:     flows.Endpoint{IP: netip.MustParseAddr("10.244.1.5"), Port: 40112, Namespace: "shop", Pod: "web-1"},
		Dst:     flows.Endpoint{IP: netip.MustParseAddr("10.244.2.7"), Port: 5432, Namespace: "shop", Pod: "db-0"},
		Verdict: v, Seq: seq,
	}
}

// fakeAgent serves GET /flows as an agent does: the records whose
// verdict matches, then in follow mode those sent on live.
func fakeAgent(t *testing.T, recs []flows.Record, live chan flows.Record) (*httptest.Server, chan url.Values) {
	queries := make(chan url.Values, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/flows" {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		queries <- q
		if q.Get("verdict") == "bogus" {
			http.Error(w, `verdict "bogus": want forwarded, dropped-policy or dropped-guard`, http.StatusBadRequest)
			return
		}
		enc := json.NewEncoder(w)
		if q.Get("follow") != "true" {
			for _, rec := range recs {
				if v := q.Get("verdict"); v == "" || v == string(rec.Verdict) {
					_ = enc.Encode(rec)
				}
			}
			return
		}
		w.(http.Flusher).Flush()
		for {
			select {
			case <-r.Context().Done():
				return
			case rec, ok := <-live:
				if !ok {
					return
				}
				_ = enc.Encode(rec)
				w.(http.Flusher).Flush()
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv, queries
}

func TestAgentSourceListMergesByTime(t *testing.T) {
	a, _ := fakeAgent(t, []flows.Record{record(1, flows.Forwarded), record(3, flows.DroppedPolicy)}, nil)
	b, qb := fakeAgent(t, []flows.Record{record(2, flows.DroppedGuard), record(4, flows.Forwarded)}, nil)
	src, err := NewAgentSource([]string{a.URL, b.URL + "/"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := src.List(context.Background(), url.Values{"limit": {"3"}, "namespace": {"shop", "billing"}, "bogus": {"x"}})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, r := range got {
		seqs = append(seqs, r.Seq)
	}
	if fmt.Sprint(seqs) != "[2 3 4]" {
		t.Errorf("List with limit 3 gave seqs %v, want the newest three [2 3 4]", seqs)
	}
	q := <-qb
	if fmt.Sprint(q["namespace"]) != "[shop billing]" || q.Get("limit") != "3" || q.Has("bogus") {
		t.Errorf("agent asked with %v, want namespace and limit passed on and nothing else", q)
	}
}

func TestNewAgentSourceRefusesBadURL(t *testing.T) {
	for _, u := range []string{"127.0.0.1:9603", "ftp://x/", "http://"} {
		if _, err := NewAgentSource([]string{u}); err == nil || !strings.Contains(err.Error(), u) {
			t.Errorf("NewAgentSource(%q) = %v, want an error naming it", u, err)
		}
	}
	if _, err := NewAgentSource(nil); err == nil {
		t.Error("NewAgentSource(nil) gave no error")
	}
}

func TestHandlerListAndErrors(t *testing.T) {
	agent, _ := fakeAgent(t, []flows.Record{record(1, flows.Forwarded), record(2, flows.DroppedPolicy)}, nil)
	src, _ := NewAgentSource([]string{agent.URL})
	ui := httptest.NewServer(New(src, "test"))
	defer ui.Close()

	resp := get(t, ui.URL+"/api/flows?verdict=dropped-policy")
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || strings.Count(string(body), "\n") != 1 || !strings.Contains(string(body), `"dropped-policy"`) {
		t.Errorf("list: %d %q, want the one dropped-policy record", resp.StatusCode, body)
	}
	resp = get(t, ui.URL+"/api/flows?verdict=bogus")
	body, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != 400 || !strings.Contains(string(body), `verdict "bogus"`) {
		t.Errorf("bad verdict: %d %q, want 400 with the agent's message", resp.StatusCode, body)
	}
	agent.Close()
	if resp = get(t, ui.URL+"/api/flows"); resp.StatusCode != http.StatusBadGateway {
		t.Errorf("agent gone: %d, want 502", resp.StatusCode)
	}
}

func TestHandlerPageAndHost(t *testing.T) {
	ui := httptest.NewServer(New(nil, "test"))
	defer ui.Close()
	for path, want := range map[string]string{"/": "<svg id=\"map\"", "/app.js": "function render", "/app.css": "--dropped-guard"} {
		resp := get(t, ui.URL+path)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %d, want 200 with %q", path, resp.StatusCode, want)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
		for _, ext := range []string{`src="http`, `href="http`, "url(http", "@import", `fetch("http`} {
			if strings.Contains(string(body), ext) {
				t.Errorf("GET %s loads from elsewhere: %q", path, ext)
			}
		}
	}
	req, _ := http.NewRequest("GET", ui.URL+"/", nil)
	req.Host = "rebound.example:7380"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("Host rebound.example: %d, want 421", resp.StatusCode)
	}
	if resp = get(t, ui.URL+"/nothing"); resp.StatusCode != 404 {
		t.Errorf("GET /nothing: %d, want 404", resp.StatusCode)
	}
}

func TestHandlerFollow(t *testing.T) {
	live := make(chan flows.Record)
	agent, queries := fakeAgent(t, nil, live)
	src, _ := NewAgentSource([]string{agent.URL})
	ui := httptest.NewServer(New(src, "test"))
	defer ui.Close()
	resp := get(t, ui.URL+"/api/flows?follow=true&pod=shop/web-1&limit=9")
	if q := <-queries; q.Get("follow") != "true" || q.Get("pod") != "shop/web-1" || q.Get("limit") != "9" {
		t.Errorf("agent followed with %v", q)
	}
	sc := bufio.NewScanner(resp.Body)
	for seq := uint64(1); seq <= 2; seq++ {
		live <- record(seq, flows.DroppedGuard)
		if !sc.Scan() {
			t.Fatalf("follow stream ended: %v", sc.Err())
		}
		var got flows.Record
		if err := json.Unmarshal(sc.Bytes(), &got); err != nil || got.Seq != seq {
			t.Fatalf("record %d: %q %v", seq, sc.Bytes(), err)
		}
	}
	close(live) // the agent ends its stream: the page is told why
	if !sc.Scan() || !strings.Contains(sc.Text(), `"error"`) || !strings.Contains(sc.Text(), "follow stream ended") {
		t.Errorf("after the agent's end: %q, want an error line", sc.Text())
	}
}

func TestHandlerFollowRefused(t *testing.T) {
	agent, _ := fakeAgent(t, nil, nil)
	src, _ := NewAgentSource([]string{agent.URL})
	ui := httptest.NewServer(New(src, "test"))
	defer ui.Close()
	body, _ := io.ReadAll(get(t, ui.URL+"/api/flows?follow=true&verdict=bogus").Body)
	var line followError
	if err := json.Unmarshal(body, &line); err != nil || line.Status != 400 || !strings.Contains(line.Error, `verdict "bogus"`) {
		t.Errorf("follow with a refused query: %q (%v), want an error line with status 400 and the agent's message", body, err)
	}
}

func get(t *testing.T, u string) *http.Response {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}
