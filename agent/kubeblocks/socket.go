package kubeblocks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/podnet/podnet/agent/internal/sockserve"
	"github.com/podnet/podnet/agent/kubeevents"
	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/agentsock"
)

// DefaultSocket is where the agent serves the plugins' store.
const DefaultSocket = "/run/podnet/ipam.sock"

// poolListTTL is how long the socket's server reuses a pool list: every
// allocation lists the pools, and they change only when an admin edits
// them.
const poolListTTL = time.Second

// listenGiveUp is how long the socket may fail to listen, attempt after
// attempt, before the service gives up and ends the agent: a failure
// that lasts (the socket's directory cannot be made, its path is taken
// by something that is no socket) is not mended by waiting, and a
// restarted pod says so louder than a log line.
var listenGiveUp = time.Minute

// listenSocket makes the socket; tests replace it to fail on purpose.
var listenSocket = agentsock.Listen

// Config configures the service.
type Config struct {
	// Store is block IPAM's store on the API (OpenStore): behind the
	// socket, and through Service.Store the agent's own.
	Store  ipam.Store
	Prefix string
	// Pools are created at start where the API has no pool of the name.
	Pools []ipam.Pool
	// Socket is where the plugins' store is served; empty serves none.
	Socket string
	// Events, when set, is told every invalid pool (InvalidIPPool on the
	// IPPool), read every PoolCheck (default DefaultPoolCheck).
	Events    *kubeevents.Recorder
	PoolCheck time.Duration
	Registry  prometheus.Registerer
	Logger    *slog.Logger
}

// Service seeds the pools and serves the node's plugins their store on
// the socket, through the server's caches.
type Service struct {
	cfg  Config
	keys ipam.Keys
	srv  *agentsock.Server

	// why is nil once ready, else why not.
	why       atomic.Pointer[error]
	ready     chan struct{}
	readyOnce sync.Once
}

// New returns the service; nothing runs before Run.
func New(cfg Config) *Service {
	keys := ipam.Keys{Prefix: cfg.Prefix}
	s := &Service{cfg: cfg, keys: keys, ready: make(chan struct{}),
		srv: agentsock.NewServer(cfg.Store, agentsock.Options{CachedLists: []string{keys.Pools()}, ListTTL: poolListTTL})}
	s.notReady(errors.New("not started"))
	cfg.Registry.MustRegister(socketCollector{s.srv})
	return s
}

// Store is the agent's store on the API as the socket serves it, through
// the same caches: the agent's own writers (GC, the release records
// of DELs, the removal of deleted nodes) use it, so that the node has
// one write path and the socket's cache sees their writes.
func (s *Service) Store() ipam.Store { return s.srv.Store() }

// Ready returns nil once the pools are seeded and the socket listens.
func (s *Service) Ready() error {
	if p := s.why.Load(); p != nil {
		return *p
	}
	return nil
}

// ReadyC is closed the first time the service is ready: the plugins can
// allocate.
func (s *Service) ReadyC() <-chan struct{} { return s.ready }

func (s *Service) notReady(err error) { s.why.Store(&err) }

func (s *Service) markReady() {
	s.why.Store(nil)
	s.readyOnce.Do(func() { close(s.ready) })
}

// Run seeds the pools, retrying until done, then serves the socket until
// ctx ends. A socket that stops serving is made again; one that cannot
// be made for listenGiveUp ends Run with the error.
func (s *Service) Run(ctx context.Context) error {
	backoff := 500 * time.Millisecond
	for {
		err := s.seedPools(ctx, s.cfg.Pools)
		if err == nil {
			break
		}
		s.notReady(fmt.Errorf("pools not seeded: %w", err))
		s.cfg.Logger.Error("block IPAM not ready", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	if s.cfg.Events != nil {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(func() { s.checkPools(ctx) })
	}
	if s.cfg.Socket == "" {
		s.markReady()
		<-ctx.Done()
		return nil
	}
	return s.serve(ctx)
}

// serve listens on the socket and serves it until ctx ends: the plugins'
// reads come from the server's cache (blocks at the revision last written
// or read, the pools for poolListTTL), their writes go to the API. The
// plugins on the node have no other way to the IPAM: a socket that stops
// serving is made again at once, and one that cannot be made is retried
// with backoff for listenGiveUp.
func (s *Service) serve(ctx context.Context) error {
	return sockserve.Loop{
		Path: s.cfg.Socket, What: "the plugins' IPAM store", Listen: listenSocket,
		Serve: s.srv.Serve, Ready: s.markReady, NotReady: s.notReady,
		GiveUp: listenGiveUp, Logger: s.cfg.Logger,
	}.Run(ctx)
}

// seedPools creates the pools the API does not have yet. An invalid one
// is left for an admin to mend (the allocator logs it): the API is the
// truth, the conflist only a seed.
func (s *Service) seedPools(ctx context.Context, pools []ipam.Pool) error {
	alloc := ipam.New(s.Store(), ipam.Config{Keys: s.keys, Logger: s.cfg.Logger})
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
		s.cfg.Logger.Info("pool created", "pool", p.Name, "cidr", p.CIDR)
	}
	return nil
}

// socketCollector reads the server's counts at each scrape: the plugins'
// calls on the socket, and the agent's own through Service.Store.
type socketCollector struct{ srv *agentsock.Server }

var (
	socketRequestsDesc = prometheus.NewDesc("podnet_agent_ipam_socket_requests_total",
		"Calls to the IPAM store the agent serves on its socket (the plugins'), and the agent's own through the same cache, by op (get, list, write).",
		[]string{"op"}, nil)
	socketHitsDesc = prometheus.NewDesc("podnet_agent_ipam_socket_cache_hits_total",
		"Calls to the socket's store answered from its cache, without an API request, by op (get, list).",
		[]string{"op"}, nil)
	socketConflictsDesc = prometheus.NewDesc("podnet_agent_ipam_socket_write_conflicts_total",
		"Writes through the socket's store the API refused on their revision (a write made past its cache, or a race between nodes).",
		nil, nil)
)

func (socketCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- socketRequestsDesc
	ch <- socketHitsDesc
	ch <- socketConflictsDesc
}

func (c socketCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.srv.Stats()
	ch <- prometheus.MustNewConstMetric(socketRequestsDesc, prometheus.CounterValue, float64(st.Hits+st.Reads), "get")
	ch <- prometheus.MustNewConstMetric(socketRequestsDesc, prometheus.CounterValue, float64(st.Lists), "list")
	ch <- prometheus.MustNewConstMetric(socketRequestsDesc, prometheus.CounterValue, float64(st.Writes), "write")
	ch <- prometheus.MustNewConstMetric(socketHitsDesc, prometheus.CounterValue, float64(st.Hits), "get")
	ch <- prometheus.MustNewConstMetric(socketHitsDesc, prometheus.CounterValue, float64(st.ListHits), "list")
	ch <- prometheus.MustNewConstMetric(socketConflictsDesc, prometheus.CounterValue, float64(st.Conflicts))
}
