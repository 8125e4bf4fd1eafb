// Package kubehttp carries ipam/store/kube's requests over net/http: a
// kube.Transport made of an http.RoundTripper, for the agent and the
// CLI, which have client-go's (rest.TransportFor: HTTP/2, client
// certificates and tokens that rotate, credential plugins) and link
// net/http anyway. The round tripper authenticates the requests.
//
// Plugins must not link it: net/http's initialisation costs every exec
// (internal/execcost keeps ipam/store/kube free of it, which is why this
// is a package of its own).
package kubehttp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"k8s.io/client-go/rest"

	"github.com/podnet/podnet/ipam/store/kube"
)

// Transport is a kube.Transport over an http.RoundTripper.
type Transport struct {
	rt   http.RoundTripper
	base *url.URL
}

var _ kube.Transport = (*Transport)(nil)

// New returns a Transport sending requests through rt to the API server
// at host: a URL (https://10.96.0.1:443, with a path prefix if the server
// is behind a proxy), or host:port, taken as https. rest.Config.Host is
// such a host.
func New(rt http.RoundTripper, host string) (*Transport, error) {
	if rt == nil {
		return nil, fmt.Errorf("kubernetes store: no round tripper")
	}
	if !strings.Contains(host, "://") {
		host = "https://" + host
	}
	u, err := url.Parse(host)
	if err != nil || u.Host == "" || u.Scheme != "https" && u.Scheme != "http" || u.RawQuery != "" {
		return nil, fmt.Errorf("kubernetes store: API server %q: want https://HOST[:PORT][/PATH]", host)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	return &Transport{rt: rt, base: u}, nil
}

// Server implements kube.Transport.
func (t *Transport) Server() string { return t.base.String() }

// Do implements kube.Transport. A request with a body can be sent again
// by the round tripper (GetBody) only where net/http deems it safe: on a
// connection that failed before anything was written.
func (t *Transport) Do(ctx context.Context, r kube.Request) (kube.Response, error) {
	var body io.Reader
	if r.Body != nil {
		body = bytes.NewReader(r.Body)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, t.base.String()+r.Path, body)
	if err != nil {
		return kube.Response{}, err
	}
	req.Header.Set("Accept", "application/json")
	if r.Body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := t.rt.RoundTrip(req)
	if err != nil {
		return kube.Response{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return kube.Response{}, err
	}
	return kube.Response{Status: resp.StatusCode, RetryAfter: resp.Header.Get("Retry-After"), Body: data}, nil
}

// Open opens a kube.Store whose requests go over client-go's transport
// for cfg (rest.TransportFor: HTTP/2, the credentials cfg names), wrapped
// by wrap when it is not nil (the agent counts its requests so). o gives
// the rest of the store's options; its Transport is set here.
func Open(cfg *rest.Config, wrap func(http.RoundTripper) http.RoundTripper, o kube.Options) (*kube.Store, error) {
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes store: %s: %w", o.Kubeconfig, err)
	}
	if wrap != nil {
		rt = wrap(rt)
	}
	host, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes store: %s: API server %q: %w", o.Kubeconfig, cfg.Host, err)
	}
	if o.Transport, err = New(rt, host.String()); err != nil {
		return nil, err
	}
	return kube.Open(o)
}
