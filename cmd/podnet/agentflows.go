package main

import (
	"fmt"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/podnet/podnet/agent"
	"github.com/podnet/podnet/flows"
)

const (
	defaultFlowsRingSize = 8192
	// maxFlowsRingSize bounds the ring, whose slots are allocated at
	// start: about 464 MiB at most (flows.Ring's doc comment).
	maxFlowsRingSize = 1 << 20
)

// flowsOptions are the agent's flow flags.
type flowsOptions struct {
	on       bool
	ringSize int
}

func (fo *flowsOptions) register(f *pflag.FlagSet) {
	f.BoolVar(&fo.on, "flows", false, "keep a ring of this node's flow records (connections with their policy verdicts), served at /flows on --metrics-addr and read by podnet flows")
	f.IntVar(&fo.ringSize, "flows-ring-size", defaultFlowsRingSize, "with --flows: records the ring holds, the oldest overwritten (about 460 bytes each)")
}

// config checks the flags and, with --flows and cfg's NetworkPolicy,
// gives cfg its ring; call it once cfg.NetworkPolicy is set.
func (fo *flowsOptions) config(cfg *agent.Config) error {
	if !fo.on {
		return nil
	}
	if fo.ringSize < flows.MinCapacity || fo.ringSize > maxFlowsRingSize {
		return fmt.Errorf("--flows-ring-size %d: want %d to %d records", fo.ringSize, flows.MinCapacity, maxFlowsRingSize)
	}
	if !cfg.NetworkPolicy {
		// The policy service names the pods and the rules. An operator
		// who takes --network-policy out of the shipped DaemonSet (which
		// has --flows too) gets an agent without flows, not one that
		// cannot start.
		slog.Warn("--flows without --network-policy: flows are off (the policy service names their pods and rules)")
		return nil
	}
	cfg.Flows = flows.NewRing(fo.ringSize)
	return nil
}
