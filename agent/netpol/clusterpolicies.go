package netpol

import (
	"context"
	"reflect"
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"
)

// DefaultCRDRecheck is how often the service asks the API server's
// discovery whether it serves ClusterNetworkPolicies (Config.CRDRecheck):
// a CRD installed after the agent started is followed within this time,
// and one removed is let go.
const DefaultCRDRecheck = 30 * time.Second

// clusterFollower runs the ClusterNetworkPolicy informer while the API
// server serves the resource. The informer of a missing resource would
// list in vain forever, with backoff; it is never started, so it can
// hold neither Ready nor the first apply back.
//
// Only its own goroutine (check, from Run and then from follow) starts
// and stops the informer; the store it publishes is read under s.mu.
type clusterFollower struct {
	s      *Service
	lw     cache.ListerWatcher
	served func(context.Context) (bool, error)

	stop func() // the running informer's; nil when it does not run
}

// discoveryTimeout bounds one discovery request: a slow API server
// delays the first apply by this much at most.
const discoveryTimeout = 10 * time.Second

// check asks discovery once and starts or stops the informer to match.
// It returns the informer it started, for Run to wait on at start, and
// a channel closed if it is stopped (a CRD removed before the informer
// synced must not leave Run waiting); an error of discovery changes
// nothing (the next check asks again).
func (f *clusterFollower) check(ctx context.Context) (cache.SharedIndexInformer, <-chan struct{}) {
	dctx, cancel := context.WithTimeout(ctx, discoveryTimeout)
	served, err := f.served(dctx)
	cancel()
	switch {
	case err != nil:
		if ctx.Err() == nil {
			f.s.log.Warn("cannot tell whether ClusterNetworkPolicies are served; asking again later", "err", err)
		}
		return nil, nil
	case served && f.stop == nil:
		f.s.log.Info("the API server serves ClusterNetworkPolicies: following them")
		return f.start(ctx)
	case !served && f.stop != nil:
		f.s.log.Info("the API server no longer serves ClusterNetworkPolicies: their rules go")
		f.stop()
		f.stop = nil
		f.s.setClusterPolicies(nil)
		f.s.changed()
	}
	return nil, nil
}

func (f *clusterFollower) start(ctx context.Context) (cache.SharedIndexInformer, <-chan struct{}) {
	inf := cache.NewSharedIndexInformer(f.lw, &cnpv1beta1.ClusterNetworkPolicy{}, 0, cache.Indexers{})
	// It fails only on an informer that has run and stopped.
	_ = f.s.handle(inf, "ClusterNetworkPolicies", slimClusterPolicy, sameClusterPolicy, f.s.deleted)
	if w := f.s.status; w != nil {
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: w.seen, UpdateFunc: func(_, obj any) { w.seen(obj) }})
	}
	ictx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { inf.RunWithContext(ictx) })
	stopped := make(chan struct{})
	f.stop = func() { cancel(); wg.Wait(); close(stopped) }
	// The store is empty until the first list replaces it whole: a
	// snapshot never holds part of the policies.
	f.s.setClusterPolicies(inf.GetIndexer())
	return inf, stopped
}

// follow checks every interval until ctx ends, then stops the informer.
func (f *clusterFollower) follow(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if f.stop != nil {
				f.stop()
			}
			return
		case <-t.C:
			f.check(ctx)
		}
	}
}

func (s *Service) setClusterPolicies(st cache.Indexer) {
	s.mu.Lock()
	s.clusterPolicies = st
	s.mu.Unlock()
}

// clusterPolicyList is the ClusterNetworkPolicy cache's content; nil
// while they are not followed.
func (s *Service) clusterPolicyList() []any {
	s.mu.Lock()
	st := s.clusterPolicies
	s.mu.Unlock()
	if st == nil {
		return nil
	}
	return st.List()
}

func sameClusterPolicy(a, b any) bool {
	x, ok1 := a.(*clusterPolicyObj)
	y, ok2 := b.(*clusterPolicyObj)
	return ok1 && ok2 && reflect.DeepEqual(x.ClusterPolicy, y.ClusterPolicy)
}
