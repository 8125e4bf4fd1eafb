package kubeblocks

import (
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
	return kubehttp.Open(cfg, wrap, kube.Options{Kubeconfig: "the agent's API config", Prefix: prefix})
}
