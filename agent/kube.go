package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/podnet/podnet/ipam"
)

// KubeConfig selects the Kubernetes datastore: the node registers by
// annotating its own Node (see NodeAnnotations), and the agent watches
// every Node and routes to its spec.podCIDRs as it routes to a node's
// confirmed blocks in the store. No object per pod, block or address
// exists in the API.
type KubeConfig struct {
	// REST reaches the API server: rest.InClusterConfig in a pod.
	REST *rest.Config
	// Blocks, when set, selects block IPAM on the API instead of node
	// CIDRs (see KubeBlocks).
	Blocks *KubeBlocks
}

// kubeSource is the agent's side of the Kubernetes datastore: a client
// for nodes alone, the Node informer, and the signals its events give.
type kubeSource struct {
	client *rest.RESTClient
	// requests counts every request to the API server, by verb and code.
	requests *prometheus.CounterVec
	// ownChanged is signalled when this node's Node changed in the cache
	// (its podCIDRs for the install, its annotations for the
	// registration, both read from the cache again).
	ownChanged, ownRegistration chan struct{}
}

// newKubeSource makes the client: core/v1 with a scheme of its own that
// knows nodes, rather than client-go's clientset, whose scheme registers
// every API group at start for types the agent never reads. Its requests
// are counted in podnet_agent_api_requests_total.
func newKubeSource(kc *KubeConfig, m *metrics) (*kubeSource, error) {
	if kc.REST == nil {
		return nil, errors.New("agent: Kubernetes datastore without an API server config")
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(scheme))
	cfg := rest.CopyConfig(kc.REST)
	cfg.GroupVersion = &corev1.SchemeGroupVersion
	cfg.APIPath = "/api"
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	// Protobuf lists and watches: a fraction of JSON's decode cost for
	// thousands of Nodes.
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	if cfg.UserAgent == "" {
		cfg.UserAgent = "podnet-agent"
	}
	counter := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "podnet", Subsystem: "agent", Name: "api_requests_total",
		Help: "Requests to the Kubernetes API server, by verb (GET, LIST, WATCH, PATCH) and HTTP status code.",
	}, []string{"verb", "code"})
	m.reg.MustRegister(counter)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &countingTransport{rt: rt, n: counter} })
	c, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("agent: Kubernetes client: %w", err)
	}
	return &kubeSource{client: c, requests: counter, ownChanged: make(chan struct{}, 1), ownRegistration: make(chan struct{}, 1)}, nil
}

// countingTransport counts requests by verb and status.
type countingTransport struct {
	rt http.RoundTripper
	n  *prometheus.CounterVec
}

func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	verb := r.Method
	if verb == http.MethodGet {
		switch q := r.URL.Query(); {
		case q.Get("watch") == "true" || q.Get("watch") == "1":
			verb = "WATCH"
		case strings.HasSuffix(r.URL.Path, "/nodes"):
			verb = "LIST"
		}
	}
	resp, err := t.rt.RoundTrip(r)
	code := "error"
	if err == nil {
		code = strconv.Itoa(resp.StatusCode)
	}
	t.n.WithLabelValues(verb, code).Inc()
	return resp, err
}

// runKube follows every Node until ctx ends and keeps this node's
// annotations on its own. registered is called once, after the first
// registration.
func (a *Agent) runKube(ctx context.Context, registered func()) {
	lw := cache.NewListWatchFromClient(a.kube.client, "nodes", metav1.NamespaceAll, fields.Everything())
	inf := cache.NewSharedIndexInformer(lw, &corev1.Node{}, 0, cache.Indexers{})
	// Neither fails before the informer runs.
	_ = inf.SetTransform(slimNode)
	_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		a.m.watchRestarts.Inc()
		a.log.Warn("Node list or watch failed; the informer lists again", "err", err)
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    a.onNode,
		UpdateFunc: func(_, obj any) { a.onNode(obj) },
		DeleteFunc: a.onNodeDeleted,
	}); err != nil {
		a.log.Error("Node informer", "err", err)
		return
	}
	informers := []cache.SharedIndexInformer{inf}
	if a.cfg.Kube.Blocks != nil {
		idx, err := a.ipamNodeInformer(a.cfg.Kube.REST)
		if err != nil {
			a.log.Error("IPAMNode informer", "err", err)
			return
		}
		informers = append(informers, idx)
	}
	var wg sync.WaitGroup
	for _, i := range informers {
		wg.Go(func() { i.RunWithContext(ctx) })
	}
	defer wg.Wait()
	for _, i := range informers {
		if !cache.WaitForCacheSync(ctx.Done(), i.HasSynced) {
			return
		}
	}
	// Every Node of the list has been applied: routing from the state now
	// removes only routes to nodes that are really gone.
	a.haveState.Store(true)
	a.watchSynced.Store(true)
	a.kick()
	if len(informers) == 2 && a.cfg.Store != nil {
		alloc := ipam.New(a.cfg.Store, ipam.Config{Keys: a.keys, Logger: a.log})
		wg.Go(func() { a.sweepDeletedNodes(ctx, inf.GetStore(), informers[1].GetStore(), alloc) })
	}
	r := &kubeRegistrar{
		client: a.kube.client, node: a.cfg.Node, want: NodeAnnotations(a.rec),
		get: func() (*corev1.Node, bool) {
			obj, ok, _ := inf.GetIndexer().GetByKey(a.cfg.Node)
			n, _ := obj.(*corev1.Node)
			return n, ok && n != nil
		},
		changed: a.kube.ownRegistration, registered: &a.registered, log: a.log,
	}
	r.run(ctx, registered)
}

// onNode records an added or updated Node.
func (a *Agent) onNode(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	rec, ok := NodeRecordFromNode(n)
	var cidrs []netip.Prefix
	if a.cfg.Kube.Blocks == nil {
		cidrs = PodCIDRsOf(n) // with block IPAM, the indexes say what to route
	}
	a.mu.Lock()
	own := n.Name == a.cfg.Node
	var ownCIDRsChanged bool
	if own {
		ownCIDRsChanged = !slices.Equal(a.state.podCIDRs[n.Name], cidrs)
	}
	changed := a.state.setNode(n.Name, rec, ok, cidrs)
	a.mu.Unlock()
	if changed {
		a.kick()
	}
	if own {
		signal(a.kube.ownRegistration)
		if ownCIDRsChanged {
			signal(a.kube.ownChanged)
		}
	}
}

// onNodeDeleted withdraws a deleted Node's routes.
func (a *Agent) onNodeDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	a.mu.Lock()
	changed := a.state.setNode(n.Name, NodeRecord{}, false, nil)
	a.mu.Unlock()
	if changed {
		a.kick()
	}
	if n.Name == a.cfg.Node {
		a.log.Warn("this node's Node was deleted; its config stays until it has podCIDRs again")
		signal(a.kube.ownRegistration)
		signal(a.kube.ownChanged)
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
