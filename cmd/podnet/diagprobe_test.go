package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/podnet/podnet/connectivity"
)

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T, network string) string {
	t.Helper()
	if network == "udp" {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		return strconv.Itoa(pc.LocalAddr().(*net.UDPAddr).Port)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

func TestDiagProbe(t *testing.T) {
	tcp, udp := "127.0.0.1:"+freePort(t, "tcp"), "127.0.0.1:"+freePort(t, "udp")
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		root := newRootCommand()
		root.SetArgs([]string{"diag", "serve", "--listen", tcp, "--udp", udp})
		root.SetErr(&bytes.Buffer{})
		served <- root.ExecuteContext(ctx)
	}()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("diag serve: %v", err)
		}
	}()
	probe := func(args ...string) connectivity.ProbeResult {
		t.Helper()
		root := newRootCommand()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs(append([]string{"diag", "probe"}, args...))
		if err := root.Execute(); err != nil {
			t.Fatalf("diag probe %v: %v", args, err)
		}
		var res connectivity.ProbeResult
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatalf("diag probe %v: %v: %s", args, err, out.String())
		}
		return res
	}
	for _, kind := range []string{"http", "udp"} {
		target := tcp
		if kind == "udp" {
			target = udp
		}
		res := probe("--kind", kind, "--retry-for", "5s", target)
		if host, _, _ := net.SplitHostPort(res.Peer); !res.Reached || host != "127.0.0.1" {
			t.Errorf("%s: %+v, want reached with peer 127.0.0.1", kind, res)
		}
	}
	if res := probe("--kind", "tcp", tcp); !res.Reached || res.Attempts != 1 {
		t.Errorf("tcp: %+v", res)
	}
	start := time.Now()
	closed := "127.0.0.1:" + freePort(t, "tcp")
	if res := probe("--kind", "tcp", "--expect", "reach", "--retry-for", "1s", closed); res.Reached || res.Attempts < 2 || res.Error == "" {
		t.Errorf("closed port: %+v, want not reached after retries", res)
	}
	if res := probe("--kind", "tcp", "--expect", "blocked", "--retry-for", "10s", closed); res.Reached || res.Attempts != 1 {
		t.Errorf("closed port expected blocked: %+v, want one attempt", res)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("probes of a closed port took %s", time.Since(start))
	}
	if res := probe("--kind", "dns", "localhost"); !res.Reached || len(res.Addrs) == 0 {
		t.Errorf("dns localhost: %+v", res)
	}
}
