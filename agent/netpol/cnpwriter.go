package netpol

import (
	"context"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// statusRetry is how long a status patch that failed (not on a
// conflict: then the newer object comes through the informer) waits
// before it is tried again.
const statusRetry = 5 * time.Second

// statusJitter bounds the random wait before a write: the agent whose
// wait is shortest writes, and the others mostly see its status through
// their informers before their turn, instead of all patching at once.
const statusJitter = 2 * time.Second

// statusWriter writes podnet's Accepted condition on the
// ClusterNetworkPolicies whose status does not say it yet. Every agent
// runs one and computes the same condition, so a policy is patched when
// it changes, not once per node: the patch names the resource version
// it was computed from, and the agents that lose the race see the
// winner's status through their informer.
type statusWriter struct {
	patch  func(ctx context.Context, name string, body []byte) error
	log    *slog.Logger
	jitter time.Duration

	mu    sync.Mutex
	queue map[string]*clusterPolicyObj
	kick  chan struct{}
}

func newStatusWriter(patch func(context.Context, string, []byte) error, log *slog.Logger) *statusWriter {
	return &statusWriter{patch: patch, log: log, jitter: statusJitter, queue: map[string]*clusterPolicyObj{}, kick: make(chan struct{}, 1)}
}

// seen is the informer's add and update handler: a policy whose status
// differs from podnet's condition is queued, one that says it (another
// agent wrote it) leaves the queue.
func (w *statusWriter) seen(obj any) {
	p, ok := obj.(*clusterPolicyObj)
	if !ok {
		return
	}
	if sameCondition(p.condition(ConditionAccepted), acceptedCondition(&p.ClusterPolicy, p.generation)) {
		w.mu.Lock()
		delete(w.queue, p.Name)
		w.mu.Unlock()
		return
	}
	w.mu.Lock()
	w.queue[p.Name] = p
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// run patches what is queued until ctx ends.
func (w *statusWriter) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		}
		if w.jitter > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(rand.N(w.jitter)):
			}
		}
		w.mu.Lock()
		q := w.queue
		w.queue = map[string]*clusterPolicyObj{}
		w.mu.Unlock()
		for _, p := range q {
			if err := w.write(ctx, p, time.Now()); err != nil && ctx.Err() == nil {
				w.log.Warn("ClusterNetworkPolicy status not written; retried", "policy", p.Name, "err", err, "retry_in", statusRetry)
				time.AfterFunc(statusRetry, func() { w.seen(p) })
			}
		}
	}
}

// write patches p's status with podnet's condition, on the condition
// that p is still at the version it was read at.
func (w *statusWriter) write(ctx context.Context, p *clusterPolicyObj, now time.Time) error {
	want := acceptedCondition(&p.ClusterPolicy, p.generation)
	body, err := statusPatch(p.rv, withCondition(p.conditions, want, now))
	if err != nil {
		return err
	}
	err = w.patch(ctx, p.Name, body)
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // changed or gone: the informer brings what follows
	}
	if err == nil {
		w.log.Info("ClusterNetworkPolicy status written", "policy", p.Name, "condition", want.Type, "status", want.Status, "reason", want.Reason)
	}
	return err
}

// statusPatch is the JSON merge patch of the status subresource: the
// whole list of conditions (a merge patch replaces lists), with rv as
// its precondition.
func statusPatch(rv string, conds []metav1.Condition) ([]byte, error) {
	type meta struct {
		ResourceVersion string `json:"resourceVersion"`
	}
	type status struct {
		Conditions []metav1.Condition `json:"conditions"`
	}
	return json.Marshal(struct {
		Metadata meta   `json:"metadata"`
		Status   status `json:"status"`
	}{meta{rv}, status{conds}})
}
