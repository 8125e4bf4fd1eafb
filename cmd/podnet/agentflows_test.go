package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/podnet/podnet/flows"
	"github.com/podnet/podnet/flows/flowapi"
)

func TestAgentFlowsFlags(t *testing.T) {
	root := newRootCommand()
	agentCmd, _, err := root.Find([]string{"agent"})
	if err != nil {
		t.Fatal(err)
	}
	if f := agentCmd.Flags().Lookup("flows"); f == nil || f.DefValue != "false" {
		t.Errorf("--flows: %+v", f)
	}
	if f := agentCmd.Flags().Lookup("flows-ring-size"); f == nil || f.DefValue != "8192" {
		t.Errorf("--flows-ring-size: %+v", f)
	}
	for _, tc := range []struct {
		fo       flowsOptions
		noPolicy bool
		ringSize int // 0: flows off
		wantErr  string
	}{
		{flowsOptions{ringSize: 8192}, false, 0, ""},
		{flowsOptions{on: true, ringSize: 8192}, false, 8192, ""},
		{flowsOptions{on: true, ringSize: 16}, false, 16, ""},
		{flowsOptions{on: true, ringSize: 15}, false, 0, "--flows-ring-size 15: want 16 to 1048576 records"},
		{flowsOptions{on: true, ringSize: 2000000}, false, 0, "--flows-ring-size 2000000"},
		// --network-policy taken out of a DaemonSet that has --flows:
		// the agent starts, without flows.
		{flowsOptions{on: true, ringSize: 8192}, true, 0, ""},
	} {
		ao := agentOptions{node: "n1", datastore: "kubernetes", mode: "host-gw", networkPolicy: !tc.noPolicy, flows: tc.fo}
		cfg, err := ao.config(&globalOptions{})
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%+v: %v, want %q", tc.fo, err, tc.wantErr)
			}
			continue
		}
		switch {
		case err != nil:
			t.Errorf("%+v: %v", tc.fo, err)
		case cfg.Flows == nil && tc.ringSize != 0:
			t.Errorf("%+v: no ring", tc.fo)
		case cfg.Flows != nil && cfg.Flows.Capacity() != tc.ringSize:
			t.Errorf("%+v: ring of %d", tc.fo, cfg.Flows.Capacity())
		}
	}
}

// TestServeMetricsEndsFollowers: stopping the agent's server ends a
// /flows follower's stream at once, not after Shutdown's timeout.
func TestServeMetricsEndsFollowers(t *testing.T) {
	ring := flows.NewRing(16)
	ao := &agentOptions{metricsAddr: "127.0.0.1:0"}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ao.metricsAddr = l.Addr().String()
	l.Close()
	stop, err := ao.serveMetrics(flowapi.Handler(ring, "n1"))
	if err != nil {
		t.Fatal(err)
	}
	c := &flowapi.Client{URL: "http://" + ao.metricsAddr, Timeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() {
		done <- c.Follow(context.Background(), flows.Filter{}, func(flows.Record) error { return nil })
	}()
	for deadline := time.Now().Add(5 * time.Second); ring.Stats().Subscribers == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no follower")
		}
	}
	start := time.Now()
	stop()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("stop took %v with a follower", d)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Error("the follower's stream did not end")
	}
}
