package main

import (
	"strings"
	"testing"
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
		ringSize int // 0: flows off
		wantErr  string
	}{
		{flowsOptions{ringSize: 8192}, 0, ""},
		{flowsOptions{on: true, ringSize: 8192}, 8192, ""},
		{flowsOptions{on: true, ringSize: 16}, 16, ""},
		{flowsOptions{on: true, ringSize: 15}, 0, "--flows-ring-size 15: want 16 to 1048576 records"},
		{flowsOptions{on: true, ringSize: 2000000}, 0, "--flows-ring-size 2000000"},
	} {
		ao := agentOptions{node: "n1", datastore: "kubernetes", mode: "host-gw", flows: tc.fo}
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
