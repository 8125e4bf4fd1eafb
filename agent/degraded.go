package agent

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/podnet/podnet/agent/agentstatus"
)

// Degraded is the agent of a node whose settings cannot be used (a
// ConfigMap edited wrong: Settings.Check). It touches nothing, in the
// kernel or on disk: no route, table, conflist or store; what the last
// good agent programmed keeps the node's pods working. It serves
// /healthz as alive (restarting it would not fix the ConfigMap, and a
// crash loop's back-off only delays the fix), /readyz as not ready with
// every reason, and podnet_agent_config_valid 0, until it is stopped: a
// fixed ConfigMap reaches it by the pod's restart (kubectl rollout
// restart), as every ConfigMap change does.
type Degraded struct {
	// Node names the node in /status (the agent's --node), when known.
	Node string
	errs []error
	reg  *prometheus.Registry
	log  *slog.Logger
}

// NewDegraded is a degraded agent for the settings errs (non-empty);
// reg nil makes a registry with the Go and process collectors.
func NewDegraded(errs []error, reg *prometheus.Registry, log *slog.Logger) *Degraded {
	if log == nil {
		log = slog.Default()
	}
	reg = newRegistry(reg)
	registerConfigValid(reg, false)
	return &Degraded{errs: errs, reg: reg, log: log}
}

// Handler serves /metrics, /healthz, /readyz, /status and /flows (see
// Agent.Handler).
func (d *Degraded) Handler() http.Handler {
	readiness := func() []status { return []status{{"config", errors.Join(d.errs...)}} }
	return handler(d.reg, readiness, func() agentstatus.Document {
		doc := agentstatus.Document{Node: d.Node, Degraded: true, Attachments: -1, Time: time.Now()}
		doc.Version, doc.Revision = agentstatus.Build()
		doc.Services, doc.Ready = services(readiness())
		return doc
	}, flowsUnavailable("flows are off: the agent is degraded (see /readyz)"))
}

// Run logs the reasons once and waits for ctx to end.
func (d *Degraded) Run(ctx context.Context) error {
	for _, err := range d.errs {
		d.log.Error("agent not ready: a setting cannot be used; the node's routes, tables and network config are left as they are", "err", err)
	}
	<-ctx.Done()
	return nil
}

// registerConfigValid registers podnet_agent_config_valid.
func registerConfigValid(reg *prometheus.Registry, valid bool) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "podnet", Subsystem: "agent", Name: "config_valid",
		Help: "1 when the agent's settings (routing_mode, cluster_cidr, encryption, the conflist) could be used; 0 when it runs degraded, touching nothing, /readyz saying why.",
	})
	if valid {
		g.Set(1)
	}
	reg.MustRegister(g)
}
