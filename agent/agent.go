package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipamcni"
	"github.com/podnet/podnet/netns"
)

// Config configures an Agent. Node is required, and Store unless Kube is
// set.
type Config struct {
	Node string
	// Store is the IPAM store. With Kube nil it is also the datastore:
	// the node registers in it and the agent routes from its nodes,
	// affinities and blocks. With Kube set it is only this node's own
	// IPAM (node-local bbolt), which GC cleans; nil then means no GC.
	Store ipam.Store
	// Kube, when set, makes the Kubernetes API the datastore (the
	// node-CIDR model, see KubeConfig).
	Kube *KubeConfig
	// Etcd, when set, is the client under Store: the node record is
	// written under a lease of LeaseTTL that the agent keeps alive.
	Etcd *clientv3.Client
	// Prefix is the store prefix (default ipam.DefaultPrefix).
	Prefix string
	Mode   Mode
	// UnderlayInterface carries traffic to other nodes; empty: the
	// interface of the IPv4 default route.
	UnderlayInterface string
	// NetNS is the network namespace to program (a path); empty: the
	// process's own. Tests and benchmarks run agents in-process this way.
	NetNS    string
	LeaseTTL time.Duration // default 10s
	// ResyncInterval is how often the agent reconciles even without
	// changes, repairing anything changed behind its back (default 1m).
	ResyncInterval time.Duration
	// GCInterval is how often IPAM GC runs (0: never); GCGrace how long a
	// handle must have been uncached before it is released (default 1m).
	GCInterval, GCGrace time.Duration
	// CacheDir is the CNI cache directory GC reads attachments from
	// (default cni.DefaultCacheDir; the results are under results/).
	CacheDir string
	// ReleaseDir is where DELs record releases they could not make
	// (default ipamcni.DefaultReleaseDir); GC finishes them.
	ReleaseDir string
	// Install, when set, is applied once the agent is ready.
	Install *InstallConfig
	// Registry receives the agent's metrics; nil makes a new one with the
	// Go and process collectors.
	Registry *prometheus.Registry
	Logger   *slog.Logger
}

// Agent is one node's agent. Create it with New and start it with Run.
type Agent struct {
	cfg  Config
	log  *slog.Logger
	m    *metrics
	keys ipam.Keys

	h    *netlink.Handle
	prog *Programmer
	rec  NodeRecord // this node's, once setup found the underlay
	reg  *registrar // the store datastore's
	kube *kubeSource

	mu    sync.Mutex // guards state
	state *clusterState

	trigger chan struct{}
	// readiness, each step once reached
	registered  atomic.Bool
	haveState   atomic.Bool // a full list has been read
	watchSynced atomic.Bool
	programmed  atomic.Bool
	installed   atomic.Bool
	// ready is closed when the agent is first ready.
	ready     chan struct{}
	readyOnce sync.Once
	// firstProgrammed is closed after the first complete reconcile.
	firstProgrammed chan struct{}
	// lastErr is the last reconcile error, for /readyz.
	lastErr atomic.Pointer[error]
}

// New checks cfg and returns an agent that has not started.
func New(cfg Config) (*Agent, error) {
	if err := validNodeName(cfg.Node); err != nil {
		return nil, err
	}
	if cfg.Store == nil && cfg.Kube == nil {
		return nil, errors.New("agent: no store")
	}
	if _, ok := cfg.Store.(ipam.Watcher); cfg.Kube == nil && !ok {
		return nil, fmt.Errorf("agent: store %T cannot be watched (no ipam.Watcher), so it cannot be the datastore", cfg.Store)
	}
	if cfg.Mode == "" {
		cfg.Mode = ModeAuto
	}
	if _, err := ParseMode(string(cfg.Mode)); err != nil {
		return nil, err
	}
	if cfg.Prefix == "" {
		cfg.Prefix = ipam.DefaultPrefix
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 10 * time.Second
	}
	if cfg.ResyncInterval <= 0 {
		cfg.ResyncInterval = time.Minute
	}
	if cfg.GCGrace <= 0 {
		cfg.GCGrace = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ReleaseDir == "" {
		cfg.ReleaseDir = ipamcni.DefaultReleaseDir
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = cni.DefaultCacheDir
	}
	if cfg.Install != nil {
		// A bad config file fails the start, not the install much later.
		if _, err := cfg.Install.conf(cfg.Node, cfg.Install.samplePodCIDRs()); err != nil {
			return nil, fmt.Errorf("agent: network config: %w", err)
		}
		nodeCIDRDatastore := cfg.Kube != nil && cfg.Kube.Blocks == nil
		if (cfg.Install.NodeCIDR != nil) != nodeCIDRDatastore {
			return nil, errors.New("agent: the node-CIDR install goes with the Kubernetes datastore's node-CIDR IPAM, and only with it")
		}
	}
	a := &Agent{
		cfg: cfg, log: cfg.Logger.With("node", cfg.Node), m: newMetrics(cfg.Registry),
		keys: ipam.Keys{Prefix: cfg.Prefix}, trigger: make(chan struct{}, 1), ready: make(chan struct{}), firstProgrammed: make(chan struct{}),
	}
	a.state = newClusterState(a.keys, cfg.Prefix)
	if cfg.Kube != nil {
		var err error
		if a.kube, err = newKubeSource(cfg.Kube, a.m); err != nil {
			return nil, err
		}
	}
	a.m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "podnet", Subsystem: "agent", Name: "node_registered",
		Help: "1 while the node is registered: its record in the store under a live lease, or its Node annotated.",
	}, func() float64 {
		if a.registered.Load() {
			return 1
		}
		return 0
	}))
	return a, nil
}

func validNodeName(n string) error {
	if n == "" || len(n) > 253 {
		return fmt.Errorf("agent: node name %q: must be 1 to 253 characters", n)
	}
	for _, c := range n {
		if c == '/' || c < 0x21 || c == 0x7f {
			return fmt.Errorf("agent: node name %q: no '/', spaces or control characters", n)
		}
	}
	return nil
}

// Registry is the agent's metrics registry: an embedding runtime
// registers its plugin manager's metrics here to serve them on the same
// /metrics.
func (a *Agent) Registry() *prometheus.Registry { return a.m.reg }

// Ready returns nil once the node is registered, the watch synced and the
// routes programmed, and why not otherwise.
func (a *Agent) Ready() error {
	switch {
	case !a.registered.Load() && a.kube != nil:
		return fmt.Errorf("node not registered: Node %s not annotated yet", a.cfg.Node)
	case !a.registered.Load():
		return errors.New("node not registered in the store")
	case !a.watchSynced.Load():
		return errors.New("store watch not synced")
	case !a.programmed.Load():
		if p := a.lastErr.Load(); p != nil && *p != nil {
			return fmt.Errorf("routes not programmed: %w", *p)
		}
		return errors.New("routes not programmed yet")
	case a.cfg.Install != nil && !a.installed.Load() && a.cfg.Install.NodeCIDR != nil && len(a.ownPodCIDRs()) == 0:
		return fmt.Errorf("network config not installed: Node %s has no spec.podCIDRs yet (kube-controller-manager --allocate-node-cidrs)", a.cfg.Node)
	case a.cfg.Install != nil && !a.installed.Load():
		return errors.New("network config not installed yet")
	}
	return nil
}

// ReadyC is closed the first time the agent is ready.
func (a *Agent) ReadyC() <-chan struct{} { return a.ready }

// Run runs the agent until ctx ends. On return the routes, neighbours,
// FDB entries and the VXLAN device stay in place, and the node's lease is
// not revoked: pods keep working while the agent restarts.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.setup(); err != nil {
		return err
	}
	defer a.h.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	registered := make(chan struct{})
	if a.kube != nil {
		wg.Go(func() { a.runKube(ctx, func() { close(registered) }) })
	} else {
		a.runStore(ctx, &wg, func() { close(registered) })
	}
	wg.Go(func() { a.reconcileLoop(ctx) })
	if a.cfg.GCInterval > 0 && a.cfg.Store != nil {
		wg.Go(func() { a.gcLoop(ctx) })
	}
	wg.Go(func() { a.readyLoop(ctx, registered) })
	<-ctx.Done()
	wg.Wait()
	var err error
	if a.cfg.Install != nil && a.cfg.Install.UninstallOnExit && a.installed.Load() {
		if err = a.cfg.Install.uninstall(); err == nil {
			a.log.Info("network config removed", "path", a.cfg.Install.confPath())
		}
	}
	return err
}

// setup opens the netlink handle in the target namespace, finds the
// underlay and prepares the node record.
func (a *Agent) setup() error {
	open := func() (err error) { a.h, err = dataplane.NewHandle(); return err }
	sysctl := dataplane.WriteSysctls
	if a.cfg.NetNS != "" {
		ns := a.cfg.NetNS
		if err := netns.Do(ns, open); err != nil {
			return err
		}
		sysctl = func(s []dataplane.Sysctl) error {
			return netns.Do(ns, func() error { return dataplane.WriteSysctls(s) })
		}
	} else if err := open(); err != nil {
		return err
	}
	ul, err := findUnderlay(a.h, a.cfg.UnderlayInterface)
	if err != nil {
		a.h.Close()
		return err
	}
	// Traffic from other nodes to this node's pods, and the replies to
	// pods' traffic that left the node, arrive on the underlay and are
	// forwarded to the pods' veths: the node forwards from the start, as
	// Felix makes it. IPv6 forwarding waits for the first IPv6 route
	// (Programmer.Apply): on a node without IPv6 pods it would only stop
	// the host from taking router advertisements.
	if err := sysctl(dataplane.NodeForwardingSysctls(true, false)); err != nil {
		a.h.Close()
		return err
	}
	podMTU, err := PodMTU(a.cfg.Mode, ul.mtu, ul.addr.Is6())
	if err != nil {
		a.h.Close()
		return fmt.Errorf("underlay interface %s: %w", ul.name, err)
	}
	if a.cfg.Install != nil {
		// The agent's own copy: the caller's config stays as given.
		ic := *a.cfg.Install
		ic.podMTU = podMTU
		a.cfg.Install = &ic
	}
	mac := VTEPMAC(a.cfg.Node)
	a.prog = &Programmer{h: a.h, log: a.log, UnderlayIndex: ul.index, UnderlayAddr: ul.addr, UnderlayMTU: ul.mtu, VTEPMAC: mac, sysctl: sysctl}
	a.rec = NodeRecord{Name: a.cfg.Node, Address: ul.addr, VTEPIP: ul.addr, VTEPMAC: mac.String(), LinkLocal6: ul.linkLocal6}
	if a.kube == nil {
		a.reg = newRegistrar(a.cfg.Store, a.cfg.Etcd, a.cfg.Prefix, a.rec, a.cfg.LeaseTTL, a.log, &a.registered)
	}
	a.log.Info("agent starting", "mode", a.cfg.Mode, "underlay", ul.name, "address", ul.addr, "link_local6", ul.linkLocal6,
		"vtep_mac", mac.String(), "underlay_mtu", ul.mtu, "pod_mtu", podMTU)
	return nil
}

func (a *Agent) kick() {
	select {
	case a.trigger <- struct{}{}:
	default:
	}
}

// reconcileLoop applies the desired state after every change, at least
// every ResyncInterval, and again soon after a failure.
func (a *Agent) reconcileLoop(ctx context.Context) {
	resync := time.NewTicker(a.cfg.ResyncInterval)
	defer resync.Stop()
	var retry <-chan time.Time
	backoff := 100 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.trigger:
		case <-resync.C:
		case <-retry:
		}
		retry = nil
		if !a.haveState.Load() {
			continue // nothing listed yet: programming now would delete every owned route
		}
		if err := a.reconcile(); err != nil {
			a.lastErr.Store(&err)
			a.log.Warn("reconcile incomplete", "err", err, "retry_in", backoff)
			retry = time.After(backoff)
			backoff = min(backoff*2, 10*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		var none error
		a.lastErr.Store(&none)
	}
}

// reconcile computes the desired state from the current snapshot and
// applies it.
func (a *Agent) reconcile() error {
	start := time.Now()
	a.mu.Lock()
	snap := a.state.snapshot()
	a.mu.Unlock()
	subnets, err := connectedSubnets(a.h, a.prog.UnderlayIndex)
	if err != nil {
		return err
	}
	d := Compute(Params{Self: a.cfg.Node, Mode: a.cfg.Mode, LocalSubnets: subnets}, snap)
	st, err := a.prog.Apply(d)
	a.m.reconcile.Observe(time.Since(start).Seconds())
	a.m.routes.Set(float64(st.Routes))
	a.m.peers.Set(float64(len(d.Peers)))
	a.m.routeConflicts.Set(float64(st.Conflicts))
	if st.Changed() {
		a.log.Info("routes reconciled", "routes", st.Routes, "added", st.Added, "replaced", st.Replaced,
			"deleted", st.Deleted, "conflicts", st.Conflicts, "peers", len(d.Peers), "took", time.Since(start))
	}
	// A route that cannot be programmed (a host-gw next hop that is not
	// on-link, a conflict) is logged and counted and retried, but does
	// not hold the node back from ready: only failing to program at all
	// does.
	if st.Attempted && !a.programmed.Swap(true) {
		close(a.firstProgrammed)
	}
	if err != nil {
		a.m.reconcileErrors.Inc()
		return err
	}
	return nil
}

// readyLoop installs the plugins and config once the node is registered
// and its routes programmed, then marks the agent ready. In the node-CIDR
// model it also waits for the node's podCIDRs, and goes on rewriting the
// config when they change.
func (a *Agent) readyLoop(ctx context.Context, registered <-chan struct{}) {
	for _, ch := range []<-chan struct{}{registered, a.firstProgrammed} {
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
	switch {
	case a.cfg.Install != nil && a.cfg.Install.NodeCIDR != nil:
		a.installNodeCIDRs(ctx)
		return
	case a.cfg.Install != nil:
		if a.cfg.Kube != nil && a.cfg.Kube.Blocks != nil && !a.prepareBlocks(ctx) {
			return
		}
		backoff := 500 * time.Millisecond
		for {
			path, f, err := a.cfg.Install.apply(a.cfg.Node, nil)
			if err == nil {
				a.installed.Store(true)
				a.logInstalled(path, f)
				break
			}
			a.log.Error("install failed", "err", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
		}
	}
	a.markReady()
}

// logInstalled reports the config f written at path, and warns of each
// pod MTU the config sets itself above what the underlay carries.
func (a *Agent) logInstalled(path string, f confFile, args ...any) {
	a.log.Info("network config installed", append([]any{"path", path}, args...)...)
	for _, mtu := range f.mtuAbove {
		a.log.Warn("the network config's own pod MTU is larger than the underlay carries once encapsulated: "+
			"large packets between pods of different nodes depend on ICMP fragmentation-needed, and are lost where it is filtered; "+
			"remove mtu from the config to have the agent set it",
			"path", path, "mtu", mtu, "pod_mtu", a.cfg.Install.podMTU, "mode", a.cfg.Mode)
	}
}

// finishReleases runs c.finishReleases and reports what it did.
func (a *Agent) finishReleases(ctx context.Context, c *collector) {
	n, err := c.finishReleases(ctx)
	a.m.gcReleased.Add(float64(n))
	if err != nil {
		a.m.gcErrors.Inc()
		a.log.Warn("releases recorded by DELs", "dir", c.releaseDir, "err", err)
	}
	if n > 0 {
		a.log.Info("released the addresses DELs could not", "handles", n)
	}
}

func (a *Agent) markReady() {
	a.readyOnce.Do(func() {
		close(a.ready)
		a.log.Info("agent ready")
	})
}

// gcLoop runs IPAM GC every GCInterval: the releases DELs recorded, at
// start and then every pass, and the addresses whose attachment is gone.
func (a *Agent) gcLoop(ctx context.Context) {
	c := &collector{alloc: ipam.New(a.cfg.Store, ipam.Config{Keys: a.keys, Logger: a.log}), store: a.cfg.Store, keys: a.keys,
		node: a.cfg.Node, releaseDir: a.cfg.ReleaseDir,
		cacheDir: a.cfg.CacheDir, grace: a.cfg.GCGrace, now: time.Now, suspects: map[string]time.Time{}}
	a.finishReleases(ctx, c)
	t := time.NewTicker(a.cfg.GCInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a.finishReleases(ctx, c)
		n, err := c.pass(ctx)
		a.m.gcReleased.Add(float64(n))
		if err != nil {
			a.m.gcErrors.Inc()
			a.log.Warn("IPAM GC failed", "err", err)
		}
		if n > 0 {
			a.log.Info("IPAM GC released leaked addresses", "count", n)
		}
	}
}
