package route

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"

	"github.com/podnet/podnet/agent/clusterstate"
	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/internal/sysctlrecord"
	"github.com/podnet/podnet/netns"
)

// Config configures the route service.
type Config struct {
	// Node is this node's name.
	Node string
	Mode Mode
	// UnderlayInterface carries traffic to other nodes; empty: the
	// interface of the IPv4 default route.
	UnderlayInterface string
	// NetNS is the network namespace to program (a path); empty: the
	// process's own.
	NetNS string
	// ResyncInterval is how often the service reconciles even without
	// changes, repairing anything changed behind its back.
	ResyncInterval time.Duration
	// SysctlRecord is the file (sysctlrecord) in which the original value
	// of each node-wide sysctl the service changes is recorded before it
	// is first changed, so that removing podnet restores exactly those;
	// empty: nothing is recorded.
	SysctlRecord string
	// WireGuard routes other nodes' pods through podnet.wg (see
	// Params.WireGuard), whose peers Peers keeps.
	WireGuard bool
	Peers     PeerSyncer
	Registry  prometheus.Registerer
	Logger    *slog.Logger
}

// PeerSyncer keeps the encrypted device's peers: each reconcile gives it
// the desired routes (their WireGuard routes say which prefixes go to
// which node) and the nodes' records, before the routes are applied.
type PeerSyncer interface {
	SyncPeers(d Desired, nodes map[string]clusterstate.NodeRecord) error
}

// Service programs this node's routes, neighbours and FDB entries from
// the cluster view: after every change the source makes, at least every
// ResyncInterval, and again soon after a failure.
type Service struct {
	cfg  Config
	view *clusterstate.View
	m    *metrics

	h    *netlink.Handle
	prog *Programmer
	rec  clusterstate.NodeRecord
	mtu  int
	ul   underlay
	// watch wakes Run when a route of the agent is deleted.
	watch *routeWatch

	programmed atomic.Bool
	// firstProgrammed is closed after the first complete reconcile.
	firstProgrammed chan struct{}
	// lastErr is the last reconcile error, for readiness.
	lastErr atomic.Pointer[error]
}

// New returns the service, its metrics registered; Setup prepares the
// node before Run.
func New(cfg Config, view *clusterstate.View) *Service {
	return &Service{cfg: cfg, view: view, m: newMetrics(cfg.Registry), firstProgrammed: make(chan struct{})}
}

// Setup opens the netlink handle in the target namespace, finds the
// underlay, enables forwarding and prepares this node's record. Close
// releases what it opened.
func (s *Service) Setup() error {
	open := func() (err error) { s.h, err = dataplane.NewHandle(); return err }
	write := dataplane.WriteSysctls
	if s.cfg.SysctlRecord != "" {
		write = sysctlrecord.Writer(s.cfg.SysctlRecord)
	}
	sysctl := write
	if s.cfg.NetNS != "" {
		ns := s.cfg.NetNS
		if err := netns.Do(ns, open); err != nil {
			return err
		}
		sysctl = func(x []dataplane.Sysctl) error {
			return netns.Do(ns, func() error { return write(x) })
		}
	} else if err := open(); err != nil {
		return err
	}
	ul, err := findUnderlay(s.h, s.cfg.UnderlayInterface)
	if err == nil && !s.cfg.WireGuard {
		err = removeWireGuard(s.h, s.cfg.Logger)
	}
	if err != nil {
		s.h.Close()
		return err
	}
	// Traffic from other nodes to this node's pods, and the replies to
	// pods' traffic that left the node, arrive on the underlay and are
	// forwarded to the pods' veths: the node forwards from the start, as
	// Felix makes it. IPv6 forwarding waits for the first IPv6 route
	// (Programmer.Apply): on a node without IPv6 pods it would only stop
	// the host from taking router advertisements.
	if err := sysctl(dataplane.NodeForwardingSysctls(true, false)); err != nil {
		s.h.Close()
		return err
	}
	mtuOf := PodMTU
	if s.cfg.WireGuard {
		mtuOf = EncryptedPodMTU
	}
	podMTU, err := mtuOf(s.cfg.Mode, ul.mtu, ul.addr.Is6())
	if err != nil {
		s.h.Close()
		return fmt.Errorf("underlay interface %s: %w", ul.name, err)
	}
	mac := clusterstate.VTEPMAC(s.cfg.Node)
	s.mtu = podMTU
	s.ul = ul
	s.prog = &Programmer{h: s.h, log: s.cfg.Logger, UnderlayIndex: ul.index, UnderlayAddr: ul.addr, UnderlayMTU: ul.mtu, VTEPMAC: mac, sysctl: sysctl}
	s.rec = clusterstate.NodeRecord{Name: s.cfg.Node, Address: ul.addr, VTEPIP: ul.addr, VTEPMAC: mac.String(), LinkLocal6: ul.linkLocal6, Mode: string(s.cfg.Mode)}
	s.cfg.Logger.Info("agent starting", "mode", s.cfg.Mode, "underlay", ul.name, "address", ul.addr, "link_local6", ul.linkLocal6,
		"vtep_mac", mac.String(), "underlay_mtu", ul.mtu, "pod_mtu", podMTU)
	s.watch = watchRoutes(s.cfg.NetNS, s.cfg.Logger)
	return nil
}

// Close closes the netlink handle. The routes stay.
func (s *Service) Close() {
	if s.watch != nil {
		s.watch.Close()
	}
	if s.h != nil {
		s.h.Close()
	}
}

// Record is this node's record, as Setup found the underlay: what the
// source registers.
func (s *Service) Record() clusterstate.NodeRecord { return s.rec }

// UnderlayMTU is the MTU of the underlay interface Setup found, and
// whether its address is IPv6.
func (s *Service) UnderlayMTU() (mtu int, v6 bool) { return s.ul.mtu, s.ul.addr.Is6() }

// PodMTU is the pods' MTU on this node's underlay (see PodMTU).
func (s *Service) PodMTU() int { return s.mtu }

// FirstProgrammed is closed after the first reconcile that attempted
// every difference.
func (s *Service) FirstProgrammed() <-chan struct{} { return s.firstProgrammed }

// Ready returns nil once the routes have been programmed.
func (s *Service) Ready() error {
	if s.programmed.Load() {
		return nil
	}
	if p := s.lastErr.Load(); p != nil && *p != nil {
		return fmt.Errorf("routes not programmed: %w", *p)
	}
	return errors.New("routes not programmed yet")
}

// Run reconciles until ctx ends. A failed reconcile is retried with
// backoff; it never ends Run.
func (s *Service) Run(ctx context.Context) error {
	resync := time.NewTicker(s.cfg.ResyncInterval)
	defer resync.Stop()
	var retry <-chan time.Time
	backoff := 100 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.view.Changed():
		case <-resync.C:
		case <-retry:
		case <-s.watch.Gone():
		}
		retry = nil
		if !s.view.Listed() {
			continue // nothing listed yet: programming now would delete every owned route
		}
		if err := s.reconcile(); err != nil {
			s.lastErr.Store(&err)
			s.cfg.Logger.Warn("reconcile incomplete", "err", err, "retry_in", backoff)
			retry = time.After(backoff)
			backoff = min(backoff*2, 10*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		var none error
		s.lastErr.Store(&none)
	}
}

// reconcile computes the desired state from the current snapshot and
// applies it.
func (s *Service) reconcile() error {
	start := time.Now()
	snap := s.view.Snapshot()
	subnets, err := connectedSubnets(s.h, s.prog.UnderlayIndex)
	if err != nil {
		return err
	}
	d := Compute(Params{Self: s.cfg.Node, Mode: s.cfg.Mode, LocalSubnets: subnets, WireGuard: s.cfg.WireGuard}, snap)
	var perr error
	if s.cfg.Peers != nil {
		// Peers before routes: a new node's route goes in once its peer
		// can take the packets.
		perr = s.cfg.Peers.SyncPeers(d, snap.Nodes)
	}
	st, err := s.prog.Apply(d)
	err = errors.Join(perr, err)
	s.m.reconcile.Observe(time.Since(start).Seconds())
	s.m.routes.Set(float64(st.Routes))
	s.m.peers.Set(float64(len(d.Peers)))
	s.m.routeConflicts.Set(float64(st.Conflicts))
	s.watch.Reconciled(d.Routes, st.Conflicts > 0)
	if st.Changed() {
		s.cfg.Logger.Info("routes reconciled", "routes", st.Routes, "added", st.Added, "replaced", st.Replaced,
			"deleted", st.Deleted, "conflicts", st.Conflicts, "peers", len(d.Peers), "took", time.Since(start))
	}
	// A route that cannot be programmed (a host-gw next hop that is not
	// on-link, a conflict) is logged and counted and retried, but does
	// not hold the node back from ready: only failing to program at all
	// does.
	if st.Attempted && !s.programmed.Swap(true) {
		close(s.firstProgrammed)
	}
	if err != nil {
		s.m.reconcileErrors.Inc()
		return err
	}
	return nil
}

// metrics are the route service's.
type metrics struct {
	routes          prometheus.Gauge
	peers           prometheus.Gauge
	reconcile       prometheus.Histogram
	reconcileErrors prometheus.Counter
	routeConflicts  prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		routes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "podnet", Subsystem: "agent", Name: "routes_programmed",
			Help: "Routes the agent owns (proto 97) that are in place after the last reconcile.",
		}),
		peers: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "podnet", Subsystem: "agent", Name: "vxlan_peers",
			Help: "Remote nodes reached over VXLAN (one neighbour and one FDB entry each).",
		}),
		reconcile: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "podnet", Subsystem: "agent", Name: "reconcile_duration_seconds",
			Help:    "Time to compute the desired state and apply it over netlink.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
		reconcileErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "podnet", Subsystem: "agent", Name: "reconcile_errors_total",
			Help: "Reconciles that left at least one difference unapplied.",
		}),
		routeConflicts: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "podnet", Subsystem: "agent", Name: "route_conflicts",
			Help: "Desired routes whose destination already has a route podnet does not own.",
		}),
	}
	reg.MustRegister(m.routes, m.peers, m.reconcile, m.reconcileErrors, m.routeConflicts)
	return m
}
