package agent

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the agent's Prometheus metrics, on a registry of its own
// that an embedding process (a runtime with a netplugin.PluginManager)
// may register its own collectors on, so that one /metrics serves both.
type metrics struct {
	reg             *prometheus.Registry
	routes          prometheus.Gauge
	peers           prometheus.Gauge
	reconcile       prometheus.Histogram
	reconcileErrors prometheus.Counter
	routeConflicts  prometheus.Gauge
	watchRestarts   prometheus.Counter
	gcReleased      prometheus.Counter
	gcErrors        prometheus.Counter
}

func newMetrics(reg *prometheus.Registry) *metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	m := &metrics{
		reg: reg,
		routes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "podnet", Subsystem: "agent", Name: "routes_programmed",
			Help: "Routes the agent owns (proto 97) that are in place after the last reconcile.",
		}),
		peers: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "podnet", Subsystem: "agent", Name: "vxlan_peers",
			Help: "Remote nodes reached over VXLAN (one neighbour and one FDB entry each).",
		}),
		reconcile: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "podnet", Subsystem: "agent", Name: "reconcile_duration_seconds",
			Help:    "Time to compute the desired state and apply it over netlink.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
		reconcileErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "podnet", Subsystem: "agent", Name: "reconcile_errors_total",
			Help: "Reconciles that left at least one difference unapplied.",
		}),
		routeConflicts: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "podnet", Subsystem: "agent", Name: "route_conflicts",
			Help: "Desired routes whose destination already has a route podnet does not own.",
		}),
		watchRestarts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "podnet", Subsystem: "agent", Name: "watch_restarts_total",
			Help: "Times the store watch (the Node list or watch, with the Kubernetes datastore) broke and the agent listed and resynced.",
		}),
		gcReleased: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "podnet", Subsystem: "agent", Name: "gc_released_addresses_total",
			Help: "Addresses released by IPAM GC because their attachment no longer exists on this node.",
		}),
		gcErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "podnet", Subsystem: "agent", Name: "gc_errors_total",
			Help: "IPAM GC passes that failed.",
		}),
	}
	reg.MustRegister(m.routes, m.peers, m.reconcile, m.reconcileErrors, m.routeConflicts,
		m.watchRestarts, m.gcReleased, m.gcErrors)
	return m
}
