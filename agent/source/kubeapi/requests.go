package kubeapi

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// RequestCounter counts an agent's requests to the API server, by verb
// and status code, in podnet_agent_api_requests_total. One counter serves
// every client of the agent: the source's own, and the block IPAM store
// the socket serves from, which is opened before the source exists.
type RequestCounter struct {
	n *prometheus.CounterVec
}

// NewRequestCounter returns a counter that is not registered yet (the
// Source registers it).
func NewRequestCounter() *RequestCounter {
	return &RequestCounter{n: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "podnet", Subsystem: "agent", Name: "api_requests_total",
		Help: "Requests to the Kubernetes API server, by verb (GET, LIST, WATCH, POST, PUT, PATCH, DELETE) and HTTP status code (error: no response).",
	}, []string{"verb", "code"})}
}

// Wrap returns rt counting its requests here.
func (c *RequestCounter) Wrap(rt http.RoundTripper) http.RoundTripper {
	return &countingTransport{rt: rt, n: c.n}
}

type countingTransport struct {
	rt http.RoundTripper
	n  *prometheus.CounterVec
}

func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	verb := requestVerb(r)
	resp, err := t.rt.RoundTrip(r)
	code := "error"
	if err == nil {
		code = strconv.Itoa(resp.StatusCode)
	}
	t.n.WithLabelValues(verb, code).Inc()
	return resp, err
}

// requestVerb is the API verb of r: its method, except that a GET of a
// collection is a LIST, and a GET with watch set a WATCH.
func requestVerb(r *http.Request) string {
	if r.Method != http.MethodGet {
		return r.Method
	}
	if q := r.URL.Query(); q.Get("watch") == "true" || q.Get("watch") == "1" {
		return "WATCH"
	}
	if isCollection(r.URL.Path) {
		return "LIST"
	}
	return "GET"
}

// isCollection reports whether path names a collection of resources
// (/api/v1/nodes, /apis/podnet.io/v1/ipamblocks,
// /api/v1/namespaces/ns/pods) rather than one object (…/nodes/n1) or one
// of its subresources.
func isCollection(path string) bool {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return false
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	return len(parts) == 1 && parts[0] != ""
}
