package kubeapi

import (
	"context"
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/podnet/podnet/agent/clusterstate"
)

// IPAMNodes is the API resource of a node's IPAM index in block IPAM on
// the Kubernetes API (deploy/kubernetes/crds): its spec is the store's
// ipam.NodeIndex verbatim.
var IPAMNodes = schema.GroupVersionResource{Group: "podnet.io", Version: "v1", Resource: "ipamnodes"}

// ipamSetLabel marks the objects of a store whose key prefix is not the
// default (ipam/store/kube); the agent follows the default set.
const ipamSetLabel = "podnet.io/ipam-set"

// ipamNodeInformer follows every IPAMNode and feeds its spec to the
// cluster view under the index's store key, so that routes come from the
// same code as with an etcd store: confirmed blocks and published
// borrowed addresses. Indexes change when a node claims or lets go of a
// block, never on an ordinary allocation: the agents see no per-pod event.
func (s *Source) ipamNodeInformer() (cache.SharedIndexInformer, error) {
	res := s.dynamic.Resource(IPAMNodes)
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
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.onIPAMNode(obj, false) },
		UpdateFunc: func(_, obj any) { s.onIPAMNode(obj, false) },
		DeleteFunc: func(obj any) { s.onIPAMNode(obj, true) },
	})
	return inf, err
}

// onIPAMNode applies one IPAMNode's spec (or its deletion).
func (s *Source) onIPAMNode(obj any, deleted bool) {
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
		s.cfg.Logger.Warn("ignoring an IPAMNode without spec.node", "name", u.GetName())
		return
	}
	value, err := json.Marshal(spec)
	if err != nil {
		s.cfg.Logger.Warn("ignoring an undecodable IPAMNode", "name", u.GetName(), "err", err)
		return
	}
	s.cfg.View.Update(func(st *clusterstate.State) bool {
		changed, err := st.Apply(s.keys.Node(node), value, deleted)
		if err != nil {
			s.cfg.Logger.Warn("ignoring an undecodable IPAMNode", "name", u.GetName(), "err", err)
		}
		return changed
	})
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
