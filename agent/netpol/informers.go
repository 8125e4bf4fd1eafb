package netpol

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

// informers makes the four informers always run, their transforms and
// handlers.
func (s *Service) informers() ([]cache.SharedIndexInformer, error) {
	src := s.cfg.Sources
	if src.Policies == nil || src.Namespaces == nil || src.Pods == nil || src.Nodes == nil {
		return nil, errors.New("network policy: missing sources")
	}
	if (src.ClusterPolicies == nil) != (src.ClusterPoliciesServed == nil) {
		return nil, errors.New("network policy: ClusterNetworkPolicy sources: want both or neither")
	}
	type spec struct {
		name      string
		lw        cache.ListerWatcher
		obj       runtime.Object
		transform cache.TransformFunc
		same      func(a, b any) bool
		deleted   func(any)
		store     *cache.Indexer
	}
	specs := []spec{
		{"NetworkPolicies", src.Policies, &networkingv1.NetworkPolicy{}, s.slimSharedPolicy, nil, s.deleted, &s.policies},
		{"Namespaces", src.Namespaces, &corev1.Namespace{}, slimNamespace, sameNamespace, s.deleted, &s.namespaces},
		{"Pods", src.Pods, &corev1.Pod{}, s.slimSharedPod, samePod, s.podDeleted, &s.pods},
		{"Nodes", src.Nodes, &corev1.Node{}, slimNode, sameNode, s.deleted, &s.nodes},
	}
	var out []cache.SharedIndexInformer
	for _, sp := range specs {
		idx := cache.Indexers{}
		switch sp.name {
		case "NetworkPolicies":
			idx[cache.NamespaceIndex] = cache.MetaNamespaceIndexFunc // Admit's question
		case "Pods":
			idx[podIPIndex] = podIPIndexFunc // ResolveAddr's
		}
		inf := cache.NewSharedIndexInformer(sp.lw, sp.obj, 0, idx)
		if err := s.handle(inf, sp.name, sp.transform, sp.same, sp.deleted); err != nil {
			return nil, err
		}
		*sp.store = inf.GetIndexer()
		out = append(out, inf)
	}
	return out, nil
}

// handle sets an informer's transform, its watch error handler and its
// event handler, which asks for a rebuild on every change except an
// update same says policy does not see; a deletion goes to deleted.
func (s *Service) handle(inf cache.SharedIndexInformer, name string, transform cache.TransformFunc, same func(a, b any) bool, deleted func(any)) error {
	// Neither fails before the informer runs.
	_ = inf.SetTransform(transform)
	_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		s.m.watchRestarts.Inc()
		s.log.Warn("list or watch failed; the informer lists again", "resource", name, "err", err)
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { s.changed() },
		UpdateFunc: func(old, obj any) {
			if same != nil && same(old, obj) {
				s.events.broadcast() // a status update policy does not see
				return
			}
			s.changed()
		},
		DeleteFunc: deleted,
	}); err != nil {
		return fmt.Errorf("informer of %s: %w", name, err)
	}
	return nil
}
