package kubeapi

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/podnet/podnet/agent/clusterstate"
)

// registrar keeps this node's registration, the podnet.io annotations
// of NodeAnnotations, on its Node. It patches only the annotations that
// differ from the cached Node (a JSON merge patch of those keys alone, so
// it never races another writer's fields), and nothing when none does:
// an agent restarting on an annotated node makes no write. A change of
// the record (self.Changed: a rotated WireGuard key) is patched at once.
//
// Unlike an etcd lease, the registration outlives the agent: a node whose
// agent is gone keeps its routes (its pods still run) until its Node is
// deleted.
type registrar struct {
	client *rest.RESTClient
	node   string
	self   *clusterstate.Self
	// get returns the Node from the informer's cache.
	get func() (*corev1.Node, bool)
	// changed is signalled when the cached Node changed.
	changed    chan struct{}
	registered *atomic.Bool // the agent's
	log        *slog.Logger
}

// run registers the node and keeps it registered until ctx ends. first
// is called once, after the first successful registration.
func (r *registrar) run(ctx context.Context, first func()) {
	backoff := 100 * time.Millisecond
	once, waiting := false, false
	var retry <-chan time.Time
	for {
		retry = nil
		n, ok := r.get()
		switch {
		case !ok:
			r.registered.Store(false)
			if !waiting {
				r.log.Info("waiting for the kubelet to register Node", "node", r.node)
				waiting = true
			}
		default:
			waiting = false
			if err := r.register(ctx, n); err != nil {
				r.log.Warn("node registration failed", "node", r.node, "err", err, "retry_in", backoff)
				retry = time.After(backoff)
				backoff = min(backoff*2, 5*time.Second)
				break
			}
			backoff = 100 * time.Millisecond
			r.registered.Store(true)
			if !once {
				once = true
				first()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-r.changed:
		case <-r.self.Changed():
		case <-retry:
		}
	}
}

// register patches the annotations of n that differ from the record's.
func (r *registrar) register(ctx context.Context, n *corev1.Node) error {
	patch := annotationPatch(n.Annotations, NodeAnnotations(r.self.Record()))
	if patch == nil {
		return nil
	}
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := r.client.Patch(types.MergePatchType).Resource("nodes").Name(r.node).Body(patch).Do(tctx).Error()
	if err != nil {
		return fmt.Errorf("patch Node %s: %w", r.node, err)
	}
	r.log.Info("node registered", "node", r.node, "annotations", string(patch))
	return nil
}
