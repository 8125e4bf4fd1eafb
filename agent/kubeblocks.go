package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/agentsock"
	"github.com/podnet/podnet/ipamcni"
)

// IPAMNodes is the API resource of a node's IPAM index in block IPAM on
// the Kubernetes API (deploy/kubernetes/crds): its spec is the store's
// ipam.NodeIndex verbatim.
var IPAMNodes = schema.GroupVersionResource{Group: "podnet.io", Version: "v1", Resource: "ipamnodes"}

// ipamSetLabel marks the objects of a store whose key prefix is not the
// default (ipam/store/kube); the agent follows the default set.
const ipamSetLabel = "podnet.io/ipam-set"

// ipamNodeInformer follows every IPAMNode and feeds its spec to the
// cluster state under the index's store key, so that routes come from the
// same code as with an etcd store: confirmed blocks and published
// borrowed addresses. Indexes change when a node claims or lets go of a
// block, never on an ordinary allocation: the agents see no per-pod event.
func (a *Agent) ipamNodeInformer(cfg *rest.Config) (cache.SharedIndexInformer, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &countingTransport{rt: rt, n: a.kube.requests} })
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	res := client.Resource(IPAMNodes)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = "!" + ipamSetLabel
			return res.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = "!" + ipamSetLabel
			return res.Watch(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &unstructured.Unstructured{}, 0, cache.Indexers{})
	_ = inf.SetTransform(slimUnstructured)
	_, err = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { a.onIPAMNode(obj, false) },
		UpdateFunc: func(_, obj any) { a.onIPAMNode(obj, false) },
		DeleteFunc: func(obj any) { a.onIPAMNode(obj, true) },
	})
	return inf, err
}

// onIPAMNode applies one IPAMNode's spec (or its deletion).
func (a *Agent) onIPAMNode(obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	spec, _, _ := unstructured.NestedMap(u.Object, "spec")
	node, _ := spec["node"].(string)
	if node == "" {
		a.log.Warn("ignoring an IPAMNode without spec.node", "name", u.GetName())
		return
	}
	value, err := json.Marshal(spec)
	if err != nil {
		a.log.Warn("ignoring an undecodable IPAMNode", "name", u.GetName(), "err", err)
		return
	}
	a.mu.Lock()
	changed, err := a.state.apply(a.keys.Node(node), value, deleted)
	a.mu.Unlock()
	if err != nil {
		a.log.Warn("ignoring an undecodable IPAMNode", "name", u.GetName(), "err", err)
	}
	if changed {
		a.kick()
	}
}

// slimUnstructured drops what the agent never reads of a cached object
// (managed fields, annotations): most of its size.
func slimUnstructured(obj any) (any, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		u.SetManagedFields(nil)
		u.SetAnnotations(nil)
	}
	return obj, nil
}

// KubeBlocks selects block IPAM on the Kubernetes API (model B): pools,
// blocks and one index per node are podnet.io objects (CRDs in
// deploy/kubernetes/crds); the agent routes from the indexes (IPAMNodes)
// and serves the node's plugins their store on a unix socket
// (ipam/store/agentsock), through a cache, so that an allocation costs
// the API one block write. Config.Store is the agent's own store on the
// API (OpenKubeStore): for seeding pools, for GC, and behind the socket.
type KubeBlocks struct {
	// Pools are created at start where the API has no pool of the name
	// (the installed conflist's pools): the plugins may not create pools.
	// A pool that exists is left as it is: the API is the truth.
	Pools []ipam.Pool
	// Socket is where the plugins' store is served ("agent:" + Socket in
	// the conflist); empty serves none.
	Socket string
}

// DefaultIPAMSocket is where the agent serves the plugins' store.
const DefaultIPAMSocket = "/run/podnet/ipam.sock"

// poolListTTL is how long the socket's server reuses a pool list: every
// allocation lists the pools, and they change only when an admin edits
// them.
const poolListTTL = time.Second

// prepareBlocks makes what the plugins need before the config is
// installed: the pools, and the socket they allocate through, served
// until ctx ends. It retries until done or ctx ends (false).
func (a *Agent) prepareBlocks(ctx context.Context) bool {
	kb := a.cfg.Kube.Blocks
	backoff := 500 * time.Millisecond
	for {
		err := a.seedPools(ctx, kb.Pools)
		if err == nil && kb.Socket != "" {
			err = a.serveStore(ctx, kb.Socket)
		}
		if err == nil {
			return true
		}
		a.log.Error("block IPAM not ready", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// serveStore listens on path and serves the agent's store there until
// ctx ends: the plugins' reads come from its cache (blocks at the
// revision last written or read, the pools for poolListTTL), their
// writes go to the API.
func (a *Agent) serveStore(ctx context.Context, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("IPAM socket: %w", err)
	}
	l, err := agentsock.Listen(path)
	if err != nil {
		return err
	}
	opts := agentsock.Options{CachedLists: []string{a.keys.Pools()}, ListTTL: poolListTTL}
	go func() {
		// Serve ends with ctx, or when accepting fails for good: then
		// the socket is made again, as the plugins on the node have no
		// other way to the IPAM.
		for {
			err := agentsock.Serve(ctx, l, a.cfg.Store, opts)
			if ctx.Err() != nil {
				return
			}
			a.log.Error("IPAM socket stopped; listening again", "path", path, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			if l, err = agentsock.Listen(path); err != nil {
				a.log.Error("IPAM socket", "path", path, "err", err)
				return
			}
		}
	}()
	a.log.Info("serving the plugins' IPAM store", "path", path)
	return nil
}

// seedPools creates the pools the API does not have yet. An invalid one
// is left for an admin to mend (the allocator logs it): the API is the
// truth, the conflist only a seed.
func (a *Agent) seedPools(ctx context.Context, pools []ipam.Pool) error {
	alloc := ipam.New(a.cfg.Store, ipam.Config{Keys: a.keys, Logger: a.log})
	have, invalid, err := alloc.Pools(ctx)
	if err != nil {
		return fmt.Errorf("pools: %w", err)
	}
	for _, p := range pools {
		if slices.ContainsFunc(have, func(h ipam.Pool) bool { return h.Name == p.Name }) ||
			slices.ContainsFunc(invalid, func(h *ipam.InvalidPoolError) bool { return h.Name == p.Name }) {
			continue
		}
		if err := alloc.PutPool(ctx, p); err != nil {
			return fmt.Errorf("pool %s: %w", p.Name, err)
		}
		a.log.Info("pool created", "pool", p.Name, "cidr", p.CIDR)
	}
	return nil
}

// ConflistPools returns the pools the podnet-ipam sections of a conflist
// file declare: what the agent seeds for block IPAM on the API.
func ConflistPools(path string) ([]ipam.Pool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	_, ipams := ipamPlugins(doc)
	var out []ipam.Pool
	for _, conf := range ipams {
		stdin, err := json.Marshal(map[string]any{"name": doc["name"], "ipam": conf})
		if err != nil {
			return nil, err
		}
		req, err := ipamcni.ParseRequest(stdin, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		for _, p := range req.Pools {
			if !slices.ContainsFunc(out, func(q ipam.Pool) bool { return q.Name == p.Name }) {
				out = append(out, p)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no podnet-ipam pools", path)
	}
	return out, nil
}
