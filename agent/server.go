package agent

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves /metrics, /healthz and /readyz.
//
// /healthz answers 200 while the process runs: an etcd outage must not
// make every node's liveness probe restart its agent (a service that
// fails for good ends the process instead). It takes no lock and asks no
// service, so that a long policy rebuild or route reconcile never makes
// the liveness probe kill an agent that is busy. /readyz names every
// service with its readiness, one line each ("routes: ok", "ipam-socket:
// not ready: ..."), and answers 200 when all are ready, 503 otherwise.
func (a *Agent) Handler() http.Handler { return handler(a.reg, a.readiness) }

func handler(reg *prometheus.Registry, readiness func() []status) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		var b strings.Builder
		code := http.StatusOK
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
	return mux
}
