package netpol

import (
	"errors"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Sources are where the service's four informers list and watch from.
// NewSources makes them for an API server; a unit test makes them from a
// fake clientset.
type Sources struct {
	// Policies are every NetworkPolicy, Namespaces every Namespace.
	Policies, Namespaces cache.ListerWatcher
	// Pods are every pod of the cluster that has not finished: peers are
	// on any node.
	Pods cache.ListerWatcher
	// Node is this node's Node alone (its addresses).
	Node cache.ListerWatcher
}

// UnfinishedPods leaves out pods that have finished: they have no
// address policy could match (policy.PodFromAPI keeps none), and a
// cluster's completed Jobs would otherwise cost every agent memory. A
// pod that finishes leaves the watch as a deletion.
const UnfinishedPods = "status.phase!=Succeeded,status.phase!=Failed"

// NewSources makes the clients of the policy service for the API server
// of rc (NewRESTClients, user agent podnet-agent), every request counted
// by wrap (the agent's kubeapi.RequestCounter,
// podnet_agent_api_requests_total).
func NewSources(rc *rest.Config, node string, wrap func(http.RoundTripper) http.RoundTripper) (Sources, error) {
	core, netv1, err := NewRESTClients(rc, "podnet-agent", wrap)
	if err != nil {
		return Sources{}, err
	}
	return Sources{
		Policies:   cache.NewListWatchFromClient(netv1, "networkpolicies", metav1.NamespaceAll, fields.Everything()),
		Namespaces: cache.NewListWatchFromClient(core, "namespaces", metav1.NamespaceAll, fields.Everything()),
		Pods: cache.NewFilteredListWatchFromClient(core, "pods", metav1.NamespaceAll, func(o *metav1.ListOptions) {
			o.FieldSelector = UnfinishedPods
		}),
		Node: cache.NewListWatchFromClient(core, "nodes", metav1.NamespaceAll, fields.OneTermEqualSelector("metadata.name", node)),
	}, nil
}

// NewRESTClients makes core/v1 and networking.k8s.io/v1 REST clients for
// the API server of rc, over a scheme of their own (not client-go's
// clientset, whose scheme registers every API group), protobuf on the
// wire; userAgent is used when rc has none, and wrap, when not nil,
// wraps their transport.
func NewRESTClients(rc *rest.Config, userAgent string, wrap func(http.RoundTripper) http.RoundTripper) (core, networking *rest.RESTClient, err error) {
	if rc == nil {
		return nil, nil, errors.New("network policy: no API server config")
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(scheme))
	utilruntime.Must(networkingv1.AddToScheme(scheme))
	codecs := serializer.NewCodecFactory(scheme).WithoutConversion()
	client := func(gv schema.GroupVersion, apiPath string) (*rest.RESTClient, error) {
		c := rest.CopyConfig(rc)
		c.GroupVersion = &gv
		c.APIPath = apiPath
		c.NegotiatedSerializer = codecs
		c.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
		c.ContentType = "application/vnd.kubernetes.protobuf"
		if c.UserAgent == "" {
			c.UserAgent = userAgent
		}
		if wrap != nil {
			c.Wrap(wrap)
		}
		rcl, err := rest.RESTClientFor(c)
		if err != nil {
			return nil, fmt.Errorf("network policy: Kubernetes client for %s: %w", gv, err)
		}
		return rcl, nil
	}
	if core, err = client(corev1.SchemeGroupVersion, "/api"); err != nil {
		return nil, nil, err
	}
	if networking, err = client(networkingv1.SchemeGroupVersion, "/apis"); err != nil {
		return nil, nil, err
	}
	return core, networking, nil
}
