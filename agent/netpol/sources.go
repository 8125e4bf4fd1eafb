package netpol

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"
)

// Sources are where the service's informers list and watch from.
// NewSources makes them for an API server; a unit test makes them from a
// fake clientset.
type Sources struct {
	// Policies are every NetworkPolicy, Namespaces every Namespace.
	Policies, Namespaces cache.ListerWatcher
	// Pods are every pod of the cluster that has not finished: peers are
	// on any node.
	Pods cache.ListerWatcher
	// Nodes are every Node: this node's addresses (traffic from a pod's
	// own node), and every node's labels and addresses for
	// ClusterNetworkPolicy's nodes peers.
	Nodes cache.ListerWatcher
	// ClusterPolicies are every ClusterNetworkPolicy, and
	// ClusterPoliciesServed says whether the API server serves them (its
	// CRD is installed; false with a nil error when it is not). Both nil:
	// the service never follows ClusterNetworkPolicies.
	ClusterPolicies       cache.ListerWatcher
	ClusterPoliciesServed func(context.Context) (bool, error)
	// ClusterPolicyStatus, when set, applies a JSON merge patch to the
	// status of the ClusterNetworkPolicy of the name: the service writes
	// its Accepted condition (cnpstatus.go).
	ClusterPolicyStatus func(ctx context.Context, name string, patch []byte) error
}

// UnfinishedPods leaves out pods that have finished: they have no
// address policy could match (policy.PodFromAPI keeps none), and a
// cluster's completed Jobs would otherwise cost every agent memory. A
// pod that finishes leaves the watch as a deletion.
const UnfinishedPods = "status.phase!=Succeeded,status.phase!=Failed"

// ClusterPolicyResource is the resource of ClusterNetworkPolicies in
// ClusterPolicyVersion.
const ClusterPolicyResource = "clusternetworkpolicies"

// ClusterPolicyVersion is the API version of ClusterNetworkPolicy podnet
// reads, policy.networking.k8s.io/v1beta1.
var ClusterPolicyVersion = schema.GroupVersion(cnpv1beta1.GroupVersion)

// NewSources makes the clients of the policy service for the API server
// of rc (NewRESTClients and NewClusterPolicyClient, user agent
// podnet-agent), every request counted by wrap (the agent's
// kubeapi.RequestCounter, podnet_agent_api_requests_total).
func NewSources(rc *rest.Config, wrap func(http.RoundTripper) http.RoundTripper) (Sources, error) {
	core, netv1, err := NewRESTClients(rc, "podnet-agent", wrap)
	if err != nil {
		return Sources{}, err
	}
	cnp, err := NewClusterPolicyClient(rc, "podnet-agent", wrap)
	if err != nil {
		return Sources{}, err
	}
	return Sources{
		Policies:   cache.NewListWatchFromClient(netv1, "networkpolicies", metav1.NamespaceAll, fields.Everything()),
		Namespaces: cache.NewListWatchFromClient(core, "namespaces", metav1.NamespaceAll, fields.Everything()),
		Pods: cache.NewFilteredListWatchFromClient(core, "pods", metav1.NamespaceAll, func(o *metav1.ListOptions) {
			o.FieldSelector = UnfinishedPods
		}),
		Nodes:                 cache.NewListWatchFromClient(core, "nodes", metav1.NamespaceAll, fields.Everything()),
		ClusterPolicies:       cache.NewListWatchFromClient(cnp, ClusterPolicyResource, metav1.NamespaceAll, fields.Everything()),
		ClusterPoliciesServed: func(ctx context.Context) (bool, error) { return ClusterPoliciesServed(ctx, cnp) },
		ClusterPolicyStatus: func(ctx context.Context, name string, patch []byte) error {
			return cnp.Patch(types.MergePatchType).Resource(ClusterPolicyResource).Name(name).SubResource("status").
				Body(patch).Do(ctx).Error()
		},
	}, nil
}

// NewRESTClients makes core/v1 and networking.k8s.io/v1 REST clients for
// the API server of rc, over a scheme of their own (not client-go's
// clientset, whose scheme registers every API group), protobuf on the
// wire; userAgent is used when rc has none, and wrap, when not nil,
// wraps their transport.
func NewRESTClients(rc *rest.Config, userAgent string, wrap func(http.RoundTripper) http.RoundTripper) (core, networking *rest.RESTClient, err error) {
	scheme := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(scheme))
	utilruntime.Must(networkingv1.AddToScheme(scheme))
	codecs := serializer.NewCodecFactory(scheme).WithoutConversion()
	if core, err = restClient(rc, corev1.SchemeGroupVersion, "/api", codecs, true, userAgent, wrap); err != nil {
		return nil, nil, err
	}
	if networking, err = restClient(rc, networkingv1.SchemeGroupVersion, "/apis", codecs, true, userAgent, wrap); err != nil {
		return nil, nil, err
	}
	return core, networking, nil
}

// NewClusterPolicyClient makes a REST client of
// policy.networking.k8s.io/v1beta1 for the API server of rc, as
// NewRESTClients does, JSON on the wire (a custom resource has no
// protobuf form). Its scheme holds that version alone: the typed
// clientset of network-policy-api would register its alpha versions too
// and bring its apply configurations, for two calls (list, watch).
func NewClusterPolicyClient(rc *rest.Config, userAgent string, wrap func(http.RoundTripper) http.RoundTripper) (*rest.RESTClient, error) {
	scheme := runtime.NewScheme()
	utilruntime.Must(cnpv1beta1.Install(scheme))
	codecs := serializer.NewCodecFactory(scheme).WithoutConversion()
	return restClient(rc, ClusterPolicyVersion, "/apis", codecs, false, userAgent, wrap)
}

func restClient(rc *rest.Config, gv schema.GroupVersion, apiPath string, codecs runtime.NegotiatedSerializer, protobuf bool,
	userAgent string, wrap func(http.RoundTripper) http.RoundTripper) (*rest.RESTClient, error) {
	if rc == nil {
		return nil, errors.New("network policy: no API server config")
	}
	c := rest.CopyConfig(rc)
	c.GroupVersion = &gv
	c.APIPath = apiPath
	c.NegotiatedSerializer = codecs
	if protobuf {
		c.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
		c.ContentType = "application/vnd.kubernetes.protobuf"
	} else {
		c.AcceptContentTypes, c.ContentType = "application/json", "application/json"
	}
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

// ClusterPoliciesServed asks the API server's discovery, with a client
// of NewClusterPolicyClient, whether it serves ClusterNetworkPolicies in
// v1beta1: false, with no error, when the group version is unknown (the
// CRD is not installed) or lacks the resource.
func ClusterPoliciesServed(ctx context.Context, c *rest.RESTClient) (bool, error) {
	// The group version's discovery document, as kubectl reads it: a
	// GET of /apis/<group>/<version>, open to every authenticated user.
	body, err := c.Get().AbsPath("/apis", ClusterPolicyVersion.Group, ClusterPolicyVersion.Version).DoRaw(ctx)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discovery of %s: %w", ClusterPolicyVersion, err)
	}
	var l metav1.APIResourceList
	if err := json.Unmarshal(body, &l); err != nil {
		return false, fmt.Errorf("discovery of %s: %w", ClusterPolicyVersion, err)
	}
	return slices.ContainsFunc(l.APIResources, func(r metav1.APIResource) bool { return r.Name == ClusterPolicyResource }), nil
}
