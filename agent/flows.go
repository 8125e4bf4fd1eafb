package agent

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/podnet/podnet/flows"
	"github.com/podnet/podnet/flows/flowapi"
)

// flowsOff is what /flows says on an agent started without --flows.
const flowsOff = "flows are off: start the agent with --flows"

// Capture sources of podnet_flow_capture_lost_total.
const (
	FlowSourceConntrack = "conntrack"
	FlowSourceNFLOG     = "nflog"
)

// flowSink is where the agent's flow records enter: it counts them in
// the flow metrics and adds them to the ring.
type flowSink struct {
	ring *flows.Ring
	node string
	// byVerdict are podnet_flows_total's counters of the known verdicts,
	// looked up once.
	byVerdict map[flows.Verdict]prometheus.Counter
	total     *prometheus.CounterVec
	policy    *prometheus.CounterVec
	lost      *prometheus.CounterVec
}

// newFlowSink registers the flow metrics on reg, every label value known
// in advance at 0 (a policy's series appear with its first flow).
func newFlowSink(ring *flows.Ring, node string, reg prometheus.Registerer) *flowSink {
	s := &flowSink{ring: ring, node: node, byVerdict: map[flows.Verdict]prometheus.Counter{},
		total: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "podnet", Name: "flows_total",
			Help: "Flows seen (records with event start), by verdict: forwarded, dropped-policy, dropped-guard."}, []string{"verdict"}),
		policy: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "podnet", Name: "flows_policy_total",
			Help: "Flows seen, by each policy of a rule that decided them: kind, tier (ClusterNetworkPolicy), policy (namespace/name, or the name of a cluster one), verdict."},
			[]string{"kind", "tier", "policy", "verdict"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "podnet", Name: "flow_capture_lost_total",
			Help: "Events the kernel dropped before the agent read them (ENOBUFS), by source: conntrack or nflog."}, []string{"source"}),
	}
	for _, v := range []flows.Verdict{flows.Forwarded, flows.DroppedPolicy, flows.DroppedGuard} {
		s.byVerdict[v] = s.total.WithLabelValues(string(v))
	}
	s.lost.WithLabelValues(FlowSourceConntrack)
	s.lost.WithLabelValues(FlowSourceNFLOG)
	gauge := func(name, help string, f func(flows.Stats) int) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "podnet", Subsystem: "flow", Name: name, Help: help},
			func() float64 { return float64(f(ring.Stats())) })
	}
	counter := func(name, help string, f func() uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "podnet", Subsystem: "flow", Name: name, Help: help},
			func() float64 { return float64(f()) })
	}
	reg.MustRegister(s.total, s.policy, s.lost,
		gauge("ring_capacity", "Records the agent's flow ring holds at most (--flows-ring-size).", func(st flows.Stats) int { return st.Capacity }),
		gauge("ring_records", "Records in the agent's flow ring.", func(st flows.Stats) int { return st.Records }),
		counter("ring_overwritten_total", "Flow records a full ring overwrote, the oldest first.", ring.Overwritten),
		counter("subscriber_dropped_total", "Flow records a follower of /flows did not get: its buffer was full.", ring.Dropped))
	return s
}

// add counts rec (a start) and stores it.
func (s *flowSink) add(rec flows.Record) {
	if rec.Node == "" {
		rec.Node = s.node
	}
	if rec.Event == flows.Start {
		c, ok := s.byVerdict[rec.Verdict]
		if !ok {
			c = s.total.WithLabelValues(string(rec.Verdict))
		}
		c.Inc()
		for i, r := range rec.Rules {
			if !seenPolicy(rec.Rules[:i], r) {
				s.policy.WithLabelValues(r.Kind, r.Tier, r.Policy(), string(rec.Verdict)).Inc()
			}
		}
	}
	s.ring.Add(rec)
}

// seenPolicy is whether a rule of r's policy is among rules: a flow
// counts once for a policy whose two rules (egress and ingress) decided
// it.
func seenPolicy(rules []flows.Rule, r flows.Rule) bool {
	for _, o := range rules {
		if o.Kind == r.Kind && o.Tier == r.Tier && o.Namespace == r.Namespace && o.Name == r.Name {
			return true
		}
	}
	return false
}

// FlowSink is where the agent's flow capture (agent/flowcap) hands its
// records: counted in podnet_flows_total and podnet_flows_policy_total,
// given the agent's node when they name none, and added to the ring
// /flows serves. Nil when flows are off (Config.Flows nil).
func (a *Agent) FlowSink() func(flows.Record) {
	if a.flows == nil {
		return nil
	}
	return a.flows.add
}

// FlowLost counts n events the kernel dropped before the flow capture
// read them, by source (FlowSourceConntrack, FlowSourceNFLOG). Nil when
// flows are off.
func (a *Agent) FlowLost() func(source string, n uint64) {
	if a.flows == nil {
		return nil
	}
	return func(source string, n uint64) { a.flows.lost.WithLabelValues(source).Add(float64(n)) }
}

// flowsHandler serves /flows: the ring's, or 404 saying how to turn
// flows on.
func (a *Agent) flowsHandler() http.Handler {
	if a.flows == nil {
		return flowsUnavailable(flowsOff)
	}
	return flowapi.Handler(a.flows.ring, a.cfg.Node)
}

func flowsUnavailable(msg string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, msg, http.StatusNotFound) })
}
