package agent

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
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
	return reg
}
