package netplugin

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Operation types, kubelet's label values.
const (
	OpSetUpPod            = "set_up_pod"
	OpTearDownPod         = "tear_down_pod"
	OpGetPodNetworkStatus = "get_pod_network_status"
)

// metrics are kubelet's network plugin metrics, under kubelet's names so
// dashboards and alerts written for kubelet work unchanged.
type metrics struct {
	total    *prometheus.CounterVec
	errors   *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "network_plugin_operations_total",
			Help: "Cumulative number of network plugin operations by operation type.",
		}, []string{"operation_type"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "network_plugin_operations_errors_total",
			Help: "Cumulative number of network plugin operation errors by operation type.",
		}, []string{"operation_type"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "kubelet", Name: "network_plugin_operations_duration_seconds",
			Help:    "Latency in seconds of network plugin operations, by operation type.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"operation_type"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.total, m.errors, m.duration} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *metrics) record(op string, start time.Time, err error) {
	m.total.WithLabelValues(op).Inc()
	m.duration.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if err != nil {
		m.errors.WithLabelValues(op).Inc()
	}
}
