package agent

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/podnet/podnet/version"
)

// newRegistry returns reg, or when nil a new registry with the Go and
// process collectors. The agent's metrics live on a registry of their
// own that an embedding process (a runtime with a
// netplugin.PluginManager) may register its own collectors on, so that
// one /metrics serves both; each service registers its own metrics there.
func newRegistry(reg *prometheus.Registry) *prometheus.Registry {
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	// Already there when the degraded agent reuses the registry of an
	// agent that could not start.
	_ = reg.Register(buildInfo())
	return reg
}

// buildInfo is podnet_build_info, 1 with the build's version as labels,
// the convention of Kubernetes' and Prometheus's own *_build_info: a
// dashboard or an alert sees which nodes run which podnet.
func buildInfo() prometheus.Collector {
	in := version.Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "podnet_build_info",
		Help:        "1, labelled with the running podnet's version, its commit and Go version.",
		ConstLabels: prometheus.Labels{"version": in.Version, "revision": in.Revision, "goversion": in.GoVersion},
	})
	g.Set(1)
	return g
}
