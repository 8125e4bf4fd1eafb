package kubeapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/podnet/podnet/agent/clusterstate"
	"github.com/podnet/podnet/ipam"
)

// Config configures the Kubernetes API source.
type Config struct {
	Node string
	// REST reaches the API server: rest.InClusterConfig in a pod.
	REST *rest.Config
	// Blocks routes from the nodes' IPAM indexes (IPAMNodes: block IPAM
	// on the API) instead of the Nodes' podCIDRs (the node-CIDR model).
	Blocks bool
	// Prefix is the IPAM store prefix the indexes are applied under.
	Prefix string
	View   *clusterstate.View
	// Registered is the agent's: true while the node is registered.
	Registered *atomic.Bool
	// Restarts counts the Node informer's list or watch failures.
	Restarts prometheus.Counter
	// Requests, when set, is the request counter the agent's other
	// clients count in too (the block IPAM store's); nil: a new one. The
	// source registers it.
	Requests *RequestCounter
	Registry prometheus.Registerer
	Logger   *slog.Logger
}

// Source is the Kubernetes API as the datastore: the node registers by
// annotating its own Node (see NodeAnnotations), a Node informer gives
// every node's record and, in the node-CIDR model, its spec.podCIDRs,
// routed as a node's confirmed blocks are in the store; with block IPAM
// an IPAMNode informer gives the indexes instead. Every Node and IPAMNode
// event enters the agent here.
type Source struct {
	cfg     Config
	keys    ipam.Keys
	client  *rest.RESTClient
	dynamic dynamic.Interface
	// requests counts every request to the API server, by verb and code.
	requests *RequestCounter
	// ownChanged is signalled when this node's Node changed in the cache
	// (its podCIDRs for the install, its annotations for the
	// registration, both read from the cache again).
	ownChanged, ownRegistration chan struct{}
	watchSynced                 atomic.Bool
	// synced is closed once every informer has synced; nodes and
	// ipamNodes are set before.
	synced           chan struct{}
	nodes, ipamNodes cache.Store
	// warned holds, per other node whose annotations this agent cannot
	// read, the reason last logged: once per node and reason.
	warnMu sync.Mutex
	warned map[string]string
}

// New makes the clients: core/v1 with a scheme of its own that knows
// nodes, rather than client-go's clientset, whose scheme registers every
// API group at start for types the agent never reads, and with block
// IPAM a dynamic client for IPAMNodes. Their requests are counted in
// podnet_agent_api_requests_total.
func New(cfg Config) (*Source, error) {
	if cfg.REST == nil {
		return nil, errors.New("agent: Kubernetes datastore without an API server config")
	}
	counter := cfg.Requests
	if counter == nil {
		counter = NewRequestCounter()
	}
	cfg.Registry.MustRegister(counter.n)
	s := &Source{cfg: cfg, keys: ipam.Keys{Prefix: cfg.Prefix}, requests: counter,
		ownChanged: make(chan struct{}, 1), ownRegistration: make(chan struct{}, 1), synced: make(chan struct{})}
	scheme := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(scheme))
	rc := rest.CopyConfig(cfg.REST)
	rc.GroupVersion = &corev1.SchemeGroupVersion
	rc.APIPath = "/api"
	rc.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	// Protobuf lists and watches: a fraction of JSON's decode cost for
	// thousands of Nodes.
	rc.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	if rc.UserAgent == "" {
		rc.UserAgent = "podnet-agent"
	}
	rc.Wrap(s.CountRequests)
	var err error
	if s.client, err = rest.RESTClientFor(rc); err != nil {
		return nil, fmt.Errorf("agent: Kubernetes client: %w", err)
	}
	if cfg.Blocks {
		dc := rest.CopyConfig(cfg.REST)
		dc.Wrap(s.CountRequests)
		if s.dynamic, err = dynamic.NewForConfig(dc); err != nil {
			return nil, fmt.Errorf("agent: Kubernetes client for IPAMNodes: %w", err)
		}
	}
	return s, nil
}

// CountRequests wraps rt so that its requests are counted in
// podnet_agent_api_requests_total: every client the agent makes to the
// API server goes through it.
func (s *Source) CountRequests(rt http.RoundTripper) http.RoundTripper {
	return s.requests.Wrap(rt)
}

// Ready returns nil while the node is registered and the informers
// synced.
func (s *Source) Ready() error {
	switch {
	case !s.cfg.Registered.Load():
		return fmt.Errorf("node not registered: Node %s not annotated yet", s.cfg.Node)
	case !s.watchSynced.Load():
		return errors.New("informer of Nodes not synced")
	}
	return nil
}

// Synced is closed once the informers have synced.
func (s *Source) Synced() <-chan struct{} { return s.synced }

// OwnChanged is signalled when this node's Node changed its podCIDRs or
// was deleted.
func (s *Source) OwnChanged() <-chan struct{} { return s.ownChanged }

// LiveNodes are the names of the Nodes in the informer's cache; nil
// before Synced.
func (s *Source) LiveNodes() []string {
	select {
	case <-s.synced:
	default:
		return nil
	}
	var out []string
	for _, obj := range s.nodes.List() {
		if n, ok := obj.(*corev1.Node); ok {
			out = append(out, n.Name)
		}
	}
	return out
}

// IndexedNodes are the nodes that have an IPAMNode in the informer's
// cache; nil before Synced or without block IPAM.
func (s *Source) IndexedNodes() []string {
	select {
	case <-s.synced:
	default:
		return nil
	}
	if s.ipamNodes == nil {
		return nil
	}
	var out []string
	for _, obj := range s.ipamNodes.List() {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			if n, _, _ := unstructured.NestedString(u.Object, "spec", "node"); n != "" {
				out = append(out, n)
			}
		}
	}
	return out
}

// Run follows every Node (and IPAMNode) until ctx ends and keeps this
// node's annotations (self's, as it changes) on its own Node. registered is called once, after
// the first registration. An informer that cannot be set up ends Run with
// its error; list and watch failures are retried by the informers.
func (s *Source) Run(ctx context.Context, self *clusterstate.Self, registered func()) error {
	lw := cache.NewListWatchFromClient(s.client, "nodes", metav1.NamespaceAll, fields.Everything())
	inf := cache.NewSharedIndexInformer(lw, &corev1.Node{}, 0, cache.Indexers{})
	// Neither fails before the informer runs.
	_ = inf.SetTransform(slimNode)
	_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		s.cfg.Restarts.Inc()
		s.cfg.Logger.Warn("Node list or watch failed; the informer lists again", "err", err)
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    s.onNode,
		UpdateFunc: func(_, obj any) { s.onNode(obj) },
		DeleteFunc: s.onNodeDeleted,
	}); err != nil {
		return fmt.Errorf("informer of Nodes: %w", err)
	}
	informers := []cache.SharedIndexInformer{inf}
	if s.cfg.Blocks {
		idx, err := s.ipamNodeInformer()
		if err != nil {
			return fmt.Errorf("IPAMNode informer: %w", err)
		}
		informers = append(informers, idx)
		s.ipamNodes = idx.GetStore()
	}
	s.nodes = inf.GetStore()
	var wg sync.WaitGroup
	for _, i := range informers {
		wg.Go(func() { i.RunWithContext(ctx) })
	}
	defer wg.Wait()
	for _, i := range informers {
		if !cache.WaitForCacheSync(ctx.Done(), i.HasSynced) {
			return nil // ctx ended
		}
	}
	// Every Node of the list has been applied: routing from the state now
	// removes only routes to nodes that are really gone.
	s.watchSynced.Store(true)
	close(s.synced)
	s.cfg.View.MarkListed()
	r := &registrar{
		client: s.client, node: s.cfg.Node, self: self,
		get: func() (*corev1.Node, bool) {
			obj, ok, _ := inf.GetIndexer().GetByKey(s.cfg.Node)
			n, _ := obj.(*corev1.Node)
			return n, ok && n != nil
		},
		changed: s.ownRegistration, registered: s.cfg.Registered, log: s.cfg.Logger,
	}
	r.run(ctx, registered)
	return nil
}

// onNode records an added or updated Node.
func (s *Source) onNode(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	own := n.Name == s.cfg.Node
	if !own && s.unreadable(n) {
		return
	}
	rec, ok := NodeRecordFromNode(n)
	var cidrs []netip.Prefix
	if !s.cfg.Blocks {
		cidrs = PodCIDRsOf(n) // with block IPAM, the indexes say what to route
	}
	var ownCIDRsChanged bool
	s.cfg.View.Update(func(st *clusterstate.State) bool {
		if own {
			ownCIDRsChanged = !slices.Equal(st.PodCIDRs(n.Name), cidrs)
		}
		return st.SetNode(n.Name, rec, ok, cidrs)
	})
	if own {
		signal(s.ownRegistration)
		if ownCIDRsChanged {
			signal(s.ownChanged)
		}
	}
}

// onNodeDeleted withdraws a deleted Node's routes.
func (s *Source) onNodeDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	s.cfg.View.Update(func(st *clusterstate.State) bool { return st.SetNode(n.Name, clusterstate.NodeRecord{}, false, nil) })
	s.warnMu.Lock()
	delete(s.warned, n.Name)
	s.warnMu.Unlock()
	if n.Name == s.cfg.Node {
		s.cfg.Logger.Warn("this node's Node was deleted; its config stays until it has podCIDRs again")
		signal(s.ownRegistration)
		signal(s.ownChanged)
	}
}

// unreadable reports whether another node's podnet.io annotations are
// in a format this agent cannot read (UnreadableAnnotations): the event
// is ignored, so that what the view holds of the node (its routes,
// from the last event it could read, or none) stays as it was and no
// other node is touched. It logs once per node and reason.
func (s *Source) unreadable(n *corev1.Node) bool {
	err := UnreadableAnnotations(n)
	s.warnMu.Lock()
	defer s.warnMu.Unlock()
	if err == nil {
		delete(s.warned, n.Name)
		return false
	}
	if s.warned[n.Name] != err.Error() {
		if s.warned == nil {
			s.warned = map[string]string{}
		}
		s.warned[n.Name] = err.Error()
		s.cfg.Logger.Warn("a Node's podnet.io annotations cannot be read; the node is ignored, its routes as they were", "other_node", n.Name, "err", err)
	}
	return true
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
