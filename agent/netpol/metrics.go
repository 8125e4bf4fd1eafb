package netpol

import (
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/podnet/podnet/dataplane/policyrules"
	"github.com/podnet/podnet/policy"
)

// metrics are the service's. The packet counters are read from the
// kernel at scrape time (Collect), so they cost nothing between scrapes.
//
// Cardinality: allowed packets are by policy rule (namespace, policy,
// direction, rule index): bounded by the rules of the policies that
// select this node's pods, and stable while pods come and go. Denied
// packets are by namespace and direction, summed over the namespace's
// isolated pods on the node, not by pod: a pod label would make a new
// series for every pod the node ever runs. Which pod dropped what is a
// question for the table itself (policyrules.Counters has it by pod).
// ClusterNetworkPolicy rules count by tier, policy, action, direction
// and rule index: bounded by the rules of the cluster's policies.
//
// The kernel's counters start again at zero when a pod's chain is
// rewritten (its rules changed) and at every resync; a sum that goes down
// is a counter reset to Prometheus, as after a restart.
type metrics struct {
	s *Service

	compile, enforceLatency prometheus.Histogram
	apply                   *prometheus.HistogramVec
	applyErrors             prometheus.Counter
	watchRestarts           prometheus.Counter
	isolated                *prometheus.GaugeVec
	policies, sets, elems   prometheus.Gauge
	clusterPolicies         prometheus.Gauge
	problems                prometheus.Gauge
	denyLogged, denyLogLost prometheus.Counter

	allowedDesc, deniedDesc, clusterDesc *prometheus.Desc
}

const ns, sub = "podnet", "policy"

func newMetrics(s *Service) *metrics {
	buckets := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}
	return &metrics{
		s: s,
		compile: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "compile_duration_seconds",
			Help: "Time to build the snapshot of the caches and compile it for this node.", Buckets: buckets}),
		apply: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "apply_duration_seconds",
			Help: "Time to write a compiled policy into the kernel, by op: apply (the change, one batch), resync (the table whole), or admit (the addresses of pods being set up, added to the last compiled policy without compiling it again).", Buckets: buckets},
			[]string{"op"}),
		enforceLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "enforce_latency_seconds",
			Help:    "Time from the first change the agent saw (a NetworkPolicy, ClusterNetworkPolicy, Namespace, Pod or Node event) to the end of the apply that enforces it, debounce and retries included.",
			Buckets: buckets}),
		applyErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "apply_errors_total",
			Help: "Applies that failed (retried with backoff)."}),
		watchRestarts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "watch_restarts_total",
			Help: "Times a list or watch of the policy service's informers failed and the informer listed again."}),
		isolated: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "isolated_pods",
			Help: "This node's pods that policies isolate, by direction."}, []string{"direction"}),
		policies: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "network_policies",
			Help: "NetworkPolicies in the cluster, as last compiled."}),
		clusterPolicies: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "cluster_network_policies",
			Help: "ClusterNetworkPolicies in the cluster, as last compiled (0 while their CRD is not served)."}),
		sets: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "sets",
			Help: "Sets of the compiled policy of this node (peer, ipBlock, port and named-port sets)."}),
		elems: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "set_elements",
			Help: "Elements of those sets (addresses, prefixes, port ranges, address-port pairs)."}),
		problems: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "problems",
			Help: "Parts of policies the API server should have refused; each matches nothing."}),
		denyLogged: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "deny_log_records_total",
			Help: "Denied packets written to the agent's log (--policy-deny-log), after the node's rate limit."}),
		denyLogLost: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "deny_log_overruns_total",
			Help: "Times the deny log's socket overflowed and records were lost before the agent read them."}),
		allowedDesc: prometheus.NewDesc("podnet_policy_allowed_packets_total",
			"First packets of connections a policy rule allowed, to or from this node's pods (later packets pass as established).",
			[]string{"namespace", "policy", "direction", "rule"}, nil),
		deniedDesc: prometheus.NewDesc("podnet_policy_denied_packets_total",
			"Packets no rule allowed to or from this node's isolated pods, dropped, by the pods' namespace.",
			[]string{"namespace", "direction"}, nil),
		clusterDesc: prometheus.NewDesc("podnet_policy_cluster_rule_packets_total",
			"First packets of connections a ClusterNetworkPolicy rule matched, to or from this node's pods: accepted, denied or passed to the next tier, by its action.",
			[]string{"tier", "policy", "action", "direction", "rule"}, nil),
	}
}

func (m *metrics) register(r prometheus.Registerer) {
	r.MustRegister(m.compile, m.apply, m.enforceLatency, m.applyErrors, m.watchRestarts, m.isolated,
		m.policies, m.clusterPolicies, m.sets, m.elems, m.problems, m.denyLogged, m.denyLogLost, m)
}

// observe sets the gauges from a compiled policy that was applied.
func (m *metrics) observe(snap *policy.Snapshot, ir *policy.IR) {
	var in, out int
	for i := range ir.Pods {
		if ir.Pods[i].Ingress.Isolated {
			in++
		}
		if ir.Pods[i].Egress.Isolated {
			out++
		}
	}
	m.isolated.WithLabelValues("ingress").Set(float64(in))
	m.isolated.WithLabelValues("egress").Set(float64(out))
	m.policies.Set(float64(len(snap.Policies)))
	m.clusterPolicies.Set(float64(len(snap.ClusterPolicies)))
	m.problems.Set(float64(len(ir.Problems)))
	m.observeSets(ir)
}

// observeSets sets the gauges of ir's sets.
func (m *metrics) observeSets(ir *policy.IR) {
	sets, elems := setStats(ir)
	m.sets.Set(float64(sets))
	m.elems.Set(float64(elems))
}

func setStats(ir *policy.IR) (sets, elems int) {
	for _, s := range ir.PeerSets {
		elems += len(s.V4) + len(s.V6)
	}
	for _, s := range ir.CIDRSets {
		elems += len(s.V4) + len(s.V6)
	}
	for _, s := range ir.PortSets {
		elems += len(s.Ranges)
	}
	for _, s := range ir.NamedPortSets {
		elems += len(s.V4) + len(s.V6)
	}
	return len(ir.PeerSets) + len(ir.CIDRSets) + len(ir.PortSets) + len(ir.NamedPortSets), elems
}

// Describe and Collect make metrics the collector of the packet counters.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.allowedDesc
	ch <- m.deniedDesc
	ch <- m.clusterDesc
}

func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	c, ok := m.s.counters()
	if !ok {
		return
	}
	for _, s := range countSeries(c) {
		d := m.allowedDesc
		switch {
		case s.denied:
			d = m.deniedDesc
		case s.cluster:
			d = m.clusterDesc
		}
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(s.packets), s.labels...)
	}
}

// counters reads the table's counters; false when the service is not
// running or they cannot be read (logged: a scrape does not fail for it).
func (s *Service) counters() (policyrules.Counters, bool) {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	if s.r == nil {
		return policyrules.Counters{}, false
	}
	c, err := s.r.Counters()
	if err != nil {
		s.log.Debug("policy counters not read", "err", err)
		return c, false
	}
	return c, true
}

// series is one sample of the packet counters.
type series struct {
	denied  bool
	cluster bool
	labels  []string
	packets uint64
}

// countSeries turns the table's counters into the metrics' samples:
// allowed by rule, denied summed by namespace and direction, and by
// ClusterNetworkPolicy rule.
func countSeries(c policyrules.Counters) []series {
	var out []series
	for k, v := range c.Allowed {
		ns, name, _ := strings.Cut(k.Policy, "/")
		out = append(out, series{labels: []string{ns, name, k.Direction.String(), strconv.Itoa(k.Index)}, packets: v.Packets})
	}
	type nsDir struct {
		ns  string
		dir policyrules.Direction
	}
	denied := map[nsDir]uint64{}
	for k, v := range c.Denied {
		denied[nsDir{k.Pod.Namespace, k.Direction}] += v.Packets
	}
	for k, v := range denied {
		out = append(out, series{denied: true, labels: []string{k.ns, k.dir.String()}, packets: v})
	}
	for k, v := range c.Cluster {
		out = append(out, series{cluster: true, packets: v.Packets,
			labels: []string{k.Tier.String(), k.Policy, k.Action.String(), k.Direction.String(), strconv.Itoa(k.Index)}})
	}
	return out
}
