package kubeblocks

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/podnet/podnet/agent/kubeevents"
	"github.com/podnet/podnet/ipam"
)

// DefaultPoolCheck is how often the pools are read for invalid ones: one
// list of IPPools per node, beside the plugins' reads.
const DefaultPoolCheck = 30 * time.Second

// checkPools reads the pools at once and every PoolCheck until ctx ends,
// and records an InvalidIPPool Event on each invalid pool once per
// revision: the plugins meet the same pool at every allocation, in
// their own processes, where no Event can be recorded.
func (s *Service) checkPools(ctx context.Context) {
	every := s.cfg.PoolCheck
	if every <= 0 {
		every = DefaultPoolCheck
	}
	// No logger: the pools are listed often, and the Event says it.
	alloc := ipam.New(s.Store(), ipam.Config{Keys: s.keys})
	var once kubeevents.Once
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		bad, err := alloc.InvalidPools(ctx)
		if err == nil {
			s.reportInvalid(&once, bad)
		} else if ctx.Err() == nil {
			s.cfg.Logger.Warn("pools not checked", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Service) reportInvalid(once *kubeevents.Once, bad []*ipam.InvalidPoolError) {
	keys := make([]string, 0, len(bad))
	for _, b := range bad {
		k := poolEventKey(b)
		keys = append(keys, k)
		if !once.First(k) {
			continue
		}
		s.cfg.Logger.Warn("IPAM pool invalid: it hands out no address until it is mended", "pool", b.Name, "err", b.Err)
		s.cfg.Events.Event(kubeevents.IPPoolRef(b.Name), corev1.EventTypeWarning, kubeevents.ReasonInvalidIPPool, invalidPoolMessage(b))
	}
	once.Keep(keys)
}

// poolEventKey is what an invalid pool is recorded once for: its name
// and revision.
func poolEventKey(b *ipam.InvalidPoolError) string {
	return fmt.Sprintf("%s@%d", b.Name, b.Revision())
}

func invalidPoolMessage(b *ipam.InvalidPoolError) string {
	return fmt.Sprintf("IPPool %q hands out no address until it is mended: %v", b.Name, b.Err)
}
