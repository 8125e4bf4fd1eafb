package wireguard

import (
	"log/slog"
	"os"
	"runtime"
)

// userspaceProcs is the GOMAXPROCS the agent runs with while wireguard-go
// is in it, given the runtime's default (the CPUs the process may use)
// and whether the operator set GOMAXPROCS, which is then kept: half the
// CPUs, at least one.
//
// wireguard-go hands every packet along a chain of goroutines (the TUN
// reader, an encryption worker and the peer's sender one way; the UDP
// reader, a decryption worker and the peer's receiver the other). Each
// hand-off to an idle P wakes another thread, which spins looking for
// work on a CPU that the pods at either end of the traffic and the
// kernel's share of it (TUN, UDP, the underlay) need just then. With
// fewer Ps the chain runs on the threads already awake: on 2 CPUs, 9.5
// context switches per request-response transaction across two agents
// instead of 16, the round trip's median from 236 to 175 µs and bulk
// throughput unchanged (docs/performance.md). Half the CPUs still leaves
// the encryption workers room to spread on a large node.
func userspaceProcs(def int, operatorSet bool) int {
	if operatorSet {
		return def
	}
	return max(1, def/2)
}

// limitProcs sets the agent's GOMAXPROCS for a userspace device and
// returns what undoes it.
func limitProcs(log *slog.Logger) (restore func()) {
	_, set := os.LookupEnv("GOMAXPROCS")
	def := runtime.GOMAXPROCS(0)
	n := userspaceProcs(def, set)
	if n == def {
		return func() {}
	}
	runtime.GOMAXPROCS(n)
	log.Info("wireguard-go: fewer Go threads run at once, so that packets are not handed between them", "gomaxprocs", n, "default", def)
	// Back to the runtime's own choice, which follows the CPU limit.
	return runtime.SetDefaultGOMAXPROCS
}
