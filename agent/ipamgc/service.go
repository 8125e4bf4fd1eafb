package ipamgc

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/podnet/podnet/ipam"
)

// Config configures IPAM GC.
type Config struct {
	// Node is this node's name: GC touches only its addresses.
	Node string
	// Store is the IPAM store: in model B the one the node's IPAM socket
	// serves, so that its cache sees GC's writes.
	Store  ipam.Store
	Prefix string
	// Interval is how often GC runs; Grace how long a handle must have
	// been uncached before it is released.
	Interval, Grace time.Duration
	// BlockGrace is how long a block of the node must have been empty
	// before GC lets it go back to its pool; the node keeps one empty
	// block per pool beyond those in use. 0: blocks are never let go.
	BlockGrace time.Duration
	// CacheDir is the CNI cache directory (the results are under
	// results/).
	CacheDir string
	// ReleaseDir is where DELs write the release records of the releases
	// they could not make.
	ReleaseDir string
	Metrics    *Metrics
	Logger     *slog.Logger
}

// Metrics are GC's, registered whether or not GC runs.
type Metrics struct {
	released       prometheus.Counter
	releasedBlocks prometheus.Counter
	errors         prometheus.Counter
}

// NewMetrics registers GC's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		released: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "podnet", Subsystem: "agent", Name: "gc_released_addresses_total",
			Help: "Addresses released by IPAM GC because their attachment no longer exists on this node.",
		}),
		releasedBlocks: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "podnet", Subsystem: "agent", Name: "gc_released_blocks_total",
			Help: "Blocks this node let go back to their pool after they stayed empty for the block grace period.",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "podnet", Subsystem: "agent", Name: "gc_errors_total",
			Help: "IPAM GC passes that failed.",
		}),
	}
	reg.MustRegister(m.released, m.releasedBlocks, m.errors)
	return m
}

// Service is the node's IPAM GC.
type Service struct {
	cfg Config
	*Metrics
}

// New returns the service.
func New(cfg Config) *Service { return &Service{cfg: cfg, Metrics: cfg.Metrics} }

// Ready is always nil: a pass that fails is retried at the next, and
// holds nothing back.
func (s *Service) Ready() error { return nil }

// Run runs IPAM GC every Interval until ctx ends: the release records
// DELs left, at start and then every pass, and the addresses whose
// attachment is gone. A failed pass is counted and logged; it never ends
// Run.
func (s *Service) Run(ctx context.Context) error {
	keys := ipam.Keys{Prefix: s.cfg.Prefix}
	c := &collector{alloc: ipam.New(s.cfg.Store, ipam.Config{Keys: keys, Logger: s.cfg.Logger}), store: s.cfg.Store, keys: keys,
		node: s.cfg.Node, releaseDir: s.cfg.ReleaseDir,
		cacheDir: s.cfg.CacheDir, grace: s.cfg.Grace, now: time.Now, suspects: map[string]time.Time{}}
	s.reportReleaseRecords(ctx, c)
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		s.reportReleaseRecords(ctx, c)
		n, err := c.pass(ctx)
		s.released.Add(float64(n))
		if err != nil {
			s.errors.Inc()
			s.cfg.Logger.Warn("IPAM GC failed", "err", err)
		}
		if n > 0 {
			s.cfg.Logger.Info("IPAM GC released leaked addresses", "count", n)
		}
		s.reclaimBlocks(ctx, c)
	}
}

// reclaimBlocks lets the node's blocks that stayed empty for BlockGrace
// go back to their pools, keeping one spare per pool, so that a node that
// once ran many pods does not hold their blocks for ever.
func (s *Service) reclaimBlocks(ctx context.Context, c *collector) {
	if s.cfg.BlockGrace <= 0 {
		return
	}
	n, err := c.alloc.ReclaimIdleBlocks(ctx, s.cfg.Node, spareBlocks, s.cfg.BlockGrace)
	s.releasedBlocks.Add(float64(n))
	if err != nil {
		s.errors.Inc()
		s.cfg.Logger.Warn("IPAM GC: letting empty blocks go", "err", err)
	}
	if n > 0 {
		s.cfg.Logger.Info("IPAM GC let empty blocks go back to their pools", "blocks", n, "empty_for", s.cfg.BlockGrace)
	}
}

// spareBlocks is how many empty blocks per pool a node keeps: the next
// pod after a scale-down gets its address without claiming a block.
const spareBlocks = 1

// reportReleaseRecords runs c.finishReleaseRecords and reports what it
// did.
func (s *Service) reportReleaseRecords(ctx context.Context, c *collector) {
	n, err := c.finishReleaseRecords(ctx)
	s.released.Add(float64(n))
	if err != nil {
		s.errors.Inc()
		s.cfg.Logger.Warn("release records of DELs", "dir", c.releaseDir, "err", err)
	}
	if n > 0 {
		s.cfg.Logger.Info("released the addresses DELs could not", "handles", n)
	}
}
