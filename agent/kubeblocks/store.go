package kubeblocks

import (
	"fmt"
	"net/http"

	"k8s.io/client-go/rest"

	"github.com/podnet/podnet/ipam/store/kube"
	"github.com/podnet/podnet/ipam/store/kube/kubehttp"
)

// OpenStore opens block IPAM's store on the Kubernetes API with the
// agent's own credentials (its in-cluster service account, or the
// --kubeconfig it was given): behind the socket the node's plugins use,
// and through Service.Store the agent's own (pools, GC, removal).
//
// Its requests go over client-go's transport for cfg (HTTP/2, one
// connection for the socket's concurrent requests, credentials that
// rotate), wrapped by wrap when it is not nil: the agent passes its
// request counter, so that the socket's requests are counted in
// podnet_agent_api_requests_total with every other request it makes.
func OpenStore(cfg *rest.Config, prefix string, wrap func(http.RoundTripper) http.RoundTripper) (*kube.Store, error) {
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes store: the agent's API config: %w", err)
	}
	if wrap != nil {
		rt = wrap(rt)
	}
	host, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes store: the agent's API server %q: %w", cfg.Host, err)
	}
	t, err := kubehttp.New(rt, host.String())
	if err != nil {
		return nil, err
	}
	return kube.Open(kube.Options{Kubeconfig: "the agent's API config", Transport: t, Prefix: prefix})
}
