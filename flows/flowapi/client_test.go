package flowapi

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/podnet/podnet/flows"
)

func TestClientList(t *testing.T) {
	ring := flows.NewRing(16)
	fill(ring, 20)
	srv := httptest.NewServer(Handler(ring, "node-1"))
	defer srv.Close()
	c := &Client{URL: srv.URL + "/", Timeout: 5 * time.Second}
	recs, err := c.List(context.Background(), flows.Filter{Verdicts: []flows.Verdict{flows.Forwarded}}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if jsonOf([]uint64{recs[0].Seq, recs[1].Seq, recs[2].Seq}) != "[15,17,19]" || recs[0].Src.PodKey() != "shop/web-1" {
		t.Errorf("list: %+v", recs)
	}
	recs, err = c.List(context.Background(), flows.Filter{Namespaces: []string{"nowhere"}}, 0)
	if err != nil || len(recs) != 0 {
		t.Errorf("a namespace without flows: %v, %v", recs, err)
	}
}

func TestClientFollow(t *testing.T) {
	ring := flows.NewRing(16)
	fill(ring, 5)
	srv := httptest.NewServer(Handler(ring, "node-1"))
	defer srv.Close()
	c := &Client{URL: srv.URL, Timeout: 5 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		waitFor(t, "the follower", func() bool { return ring.Stats().Subscribers == 1 })
		ring.Add(record("shop", flows.Forwarded))
	}()
	var got []flows.Record
	err := c.Follow(ctx, flows.Filter{}, func(r flows.Record) error {
		got = append(got, r)
		cancel()
		return nil
	})
	// Live records only: the snapshot's are not sent.
	if err != nil || len(got) != 1 || got[0].Seq != 6 {
		t.Errorf("follow: %v, %+v", err, got)
	}
	stop := errors.New("stop")
	done := make(chan struct{})
	go func() {
		// Until the follower has one: it may not have subscribed yet.
		for {
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
				ring.Add(record("shop", flows.Forwarded))
			}
		}
	}()
	err = c.Follow(context.Background(), flows.Filter{}, func(flows.Record) error { return stop })
	close(done)
	if err != stop {
		t.Errorf("fn's error: %v", err)
	}
}

// TestClientErrors: the agent's text and the API server's Status
// message are what an error says.
func TestClientErrors(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/off/flows", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "flows are off: start the agent with --flows", http.StatusNotFound)
	})
	mux.HandleFunc("/proxy/flows", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"error trying to reach service: dial tcp 10.0.0.1:9603: connect: connection refused","code":503}`))
	})
	mux.HandleFunc("/slow/flows", func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, tc := range []struct{ path, want string }{
		{"/off", "404 Not Found: flows are off: start the agent with --flows"},
		{"/proxy", "503 Service Unavailable: error trying to reach service: dial tcp 10.0.0.1:9603"},
		{"/slow", "context deadline exceeded"},
	} {
		c := &Client{URL: srv.URL + tc.path, Timeout: 200 * time.Millisecond}
		_, err := c.List(context.Background(), flows.Filter{}, 0)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: list: %v, want %q", tc.path, err, tc.want)
		}
		err = c.Follow(context.Background(), flows.Filter{}, func(flows.Record) error { return nil })
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: follow: %v, want %q", tc.path, err, tc.want)
		}
	}
}
