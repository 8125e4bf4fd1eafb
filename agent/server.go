package agent

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/podnet/podnet/agent/agentstatus"
	"github.com/podnet/podnet/flows/flowapi"
	"github.com/podnet/podnet/version"
)

// Handler serves /metrics, /healthz, /readyz, /status and /flows.
//
// /healthz answers 200 while the process runs: an etcd outage must not
// make every node's liveness probe restart its agent (a service that
// fails for good ends the process instead). It takes no lock and asks no
// service, so that a long policy rebuild or route reconcile never makes
// the liveness probe kill an agent that is busy. /readyz names every
// service with its readiness, one line each ("routes: ok", "ipam-socket:
// not ready: ..."), and answers 200 when all are ready, 503 otherwise.
// /status is the agent's status document as JSON (agentstatus, read by
// `podnet status`): the same readiness, and what the agent is and knows;
// like /readyz it asks each service's readiness, and reads summaries
// that take no lock, so it never waits for a rebuild either.
//
// /flows is the node's flow records (flowapi, with Config.Flows); without
// them it answers 404 saying how to turn them on.
func (a *Agent) Handler() http.Handler {
	return handler(a.reg, a.readiness, a.status, a.flowsHandler())
}

func handler(reg *prometheus.Registry, readiness func() []status, doc func() agentstatus.Document, flowsH http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(flowapi.Path, flowsH)
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		var b strings.Builder
		code := http.StatusOK
		fmt.Fprintf(&b, "podnet %s\n", version.Get())
		for _, st := range readiness() {
			if st.err != nil {
				code = http.StatusServiceUnavailable
				fmt.Fprintf(&b, "%s: not ready: %v\n", st.name, st.err)
			} else {
				fmt.Fprintf(&b, "%s: ok\n", st.name)
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(code)
		fmt.Fprint(w, b.String())
	})
	mux.Handle(agentstatus.Path, serveStatus(doc))
	return mux
}
