package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/podnet/podnet/agent/clusterstate"
	"github.com/podnet/podnet/agent/cniinstall"
	"github.com/podnet/podnet/agent/flowcap"
	"github.com/podnet/podnet/agent/ipamgc"
	"github.com/podnet/podnet/agent/kubeblocks"
	"github.com/podnet/podnet/agent/kubeevents"
	"github.com/podnet/podnet/agent/netpol"
	"github.com/podnet/podnet/agent/netpol/admitsock"
	"github.com/podnet/podnet/agent/noderemoval"
	"github.com/podnet/podnet/agent/route"
	"github.com/podnet/podnet/agent/source/kubeapi"
	"github.com/podnet/podnet/agent/source/kvstore"
	"github.com/podnet/podnet/agent/wireguard"
	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/dataplane/nftlayout"
	"github.com/podnet/podnet/dataplane/policyrules"
	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/netns"
)

// DefaultBlockGrace is how long a node's block stays empty before GC lets
// it go back to its pool: long enough that a deployment's rolling update
// or a burst of jobs does not make the node give blocks up and claim
// them again, and well above the clock skew between nodes (the time a
// block became empty is written by whichever node emptied it).
const DefaultBlockGrace = 15 * time.Minute

// source is the one datastore model the agent runs: it registers the
// node and fills the cluster view.
type source interface {
	// Run registers self (again whenever it changes) and follows the
	// datastore until ctx ends; registered is called once, after the
	// first registration.
	Run(ctx context.Context, self *clusterstate.Self, registered func()) error
	Ready() error
}

// service is one part of the agent, run alongside the others; its
// failure ends the agent.
type service struct {
	// name is how /readyz and errors call it.
	name  string
	run   func(ctx context.Context) error
	ready func() error
	// first is closed when the service is first ready; nil: at once.
	first <-chan struct{}
}

// Agent is one node's agent. Create it with New and start it with Run.
type Agent struct {
	cfg  Config
	log  *slog.Logger
	reg  *prometheus.Registry
	view *clusterstate.View

	src     source
	kube    *kubeapi.Source     // src, with the Kubernetes datastore
	blocks  *kubeblocks.Service // with block IPAM on the API
	routes  *route.Service
	wg      *wireguard.Service // with Config.Encryption wireguard
	policy  *netpol.Service    // with Config.NetworkPolicy
	admit   *netpol.Admission
	gc      *ipamgc.Metrics
	flows   *flowSink        // with Config.Flows
	capture *flowcap.Service // with Config.Flows
	// events records the agent's Kubernetes Events (nil: none, with
	// etcd, or a Kube config without an API server).
	events *kubeevents.Recorder
	// registered is set while the node is registered (the source's).
	registered atomic.Bool

	// services are what Run runs, set up by Run (the route service's
	// setup finds what the others need).
	mu       sync.Mutex
	services []service
	// extra services, for tests of the orchestration.
	extra []service
	// ready is closed when the agent is first ready.
	ready chan struct{}
}

// New checks cfg and returns an agent that has not started.
func New(cfg Config) (*Agent, error) {
	if err := cfg.complete(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("node", cfg.Node)
	reg := newRegistry(cfg.Registry)
	a := &Agent{cfg: cfg, log: log, reg: reg, view: clusterstate.NewView(cfg.Prefix), ready: make(chan struct{})}
	restarts := a.registerMetrics()
	var err error
	if cfg.Kube != nil {
		a.kube, err = kubeapi.New(kubeapi.Config{Node: cfg.Node, REST: cfg.Kube.REST, Blocks: cfg.Kube.Blocks != nil, Prefix: cfg.Prefix,
			View: a.view, Registered: &a.registered, Restarts: restarts, Requests: cfg.Kube.Requests, Registry: reg, Logger: log})
		a.src = a.kube
	} else {
		a.src, err = kvstore.New(kvstore.Config{Node: cfg.Node, Store: cfg.Store, Etcd: cfg.Etcd, Prefix: cfg.Prefix, LeaseTTL: cfg.LeaseTTL,
			View: a.view, Registered: &a.registered, Restarts: restarts, Logger: log})
	}
	if err != nil {
		return nil, err
	}
	if cfg.Kube != nil && cfg.Kube.REST != nil {
		if a.events, err = kubeevents.New(cfg.Kube.REST, cfg.Node, a.kube.CountRequests); err != nil {
			return nil, err
		}
	}
	rc := route.Config{Node: cfg.Node, Mode: cfg.Mode, UnderlayInterface: cfg.UnderlayInterface, NetNS: cfg.NetNS,
		ResyncInterval: cfg.ResyncInterval, SysctlRecord: cfg.SysctlRecord, Registry: reg, Logger: log}
	a.wg = newWireGuard(cfg, &rc, reg, log)
	a.routes = route.New(rc, a.view)
	if cfg.Kube != nil && cfg.Kube.Blocks != nil && cfg.Store != nil {
		// Without a store the agent only routes (a benchmark's agent).
		a.blocks = kubeblocks.New(kubeblocks.Config{Store: cfg.Store, Prefix: cfg.Prefix, Pools: cfg.Kube.Blocks.Pools,
			Socket: cfg.Kube.Blocks.Socket, Events: a.events, Registry: reg, Logger: log})
	}
	if cfg.NetworkPolicy {
		src, err := netpol.NewSources(cfg.Kube.REST, a.kube.CountRequests)
		if err != nil {
			return nil, err
		}
		pc := netpol.Config{Node: cfg.Node, NetNS: cfg.NetNS, SysctlRecord: cfg.SysctlRecord, Sources: src, ResyncInterval: cfg.ResyncInterval,
			DenyLog: cfg.PolicyDenyLog, Events: a.events, Registry: reg, Logger: log}
		if cfg.Flows != nil {
			pc.FlowLog, pc.FlowIndex = &policyrules.FlowLog{}, policyrules.FlowIndex
		}
		a.policy = netpol.New(pc)
		if a.cfg.PolicySocket == "" {
			a.cfg.PolicySocket = admitsock.DefaultSocket
		}
		a.admit = a.policy.Admission(netpol.AdmissionConfig{Socket: a.cfg.PolicySocket})
	}
	a.gc = ipamgc.NewMetrics(reg)
	if cfg.Flows != nil {
		a.flows = newFlowSink(cfg.Flows, cfg.Node, reg)
		a.capture = a.newFlowCapture()
	}
	registerConfigValid(reg, true)
	return a, nil
}

// registerMetrics registers the agent's own metrics and returns the
// counter of watch restarts, which the source counts in.
func (a *Agent) registerMetrics() prometheus.Counter {
	restarts := prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "podnet", Subsystem: "agent", Name: "watch_restarts_total",
		Help: "Times the store watch (the Node list or watch, with the Kubernetes datastore) broke and the agent listed and resynced.",
	})
	a.reg.MustRegister(restarts, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "podnet", Subsystem: "agent", Name: "node_registered",
		Help: "1 while the node is registered: its record in the store under a live lease, or its Node annotated.",
	}, func() float64 {
		if a.registered.Load() {
			return 1
		}
		return 0
	}))
	return restarts
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
func (a *Agent) Registry() *prometheus.Registry { return a.reg }

// ipamStore is the store the agent's own IPAM writers use (GC, the
// release records of DELs, the removal of deleted nodes, the pools'
// seeding): with block IPAM on the API the one the socket serves, through
// the socket's cache, so that the node has one write path and the cache
// sees every write the node makes; else Config.Store.
func (a *Agent) ipamStore() ipam.Store {
	if a.blocks != nil {
		return a.blocks.Store()
	}
	return a.cfg.Store
}

// removePolicyTable deletes the NetworkPolicy table an earlier run of
// the agent with the policy service left in the node's namespace (it
// stays when the agent stops, so that pods stay protected while it
// restarts), and the table of pods plugins closed for want of its
// answer (dataplane.Closed): an agent that no longer enforces policy
// must not leave rules nobody updates, nor pods nobody opens.
func (a *Agent) removePolicyTable() error {
	remove := func() error {
		r, err := policyrules.New(a.cfg.Node)
		if err != nil {
			return err
		}
		defer r.Close()
		if err := r.Remove(); err != nil {
			return err
		}
		// The pods plugins closed for want of an agent's answer: no
		// agent would open them now.
		c, err := dataplane.NewClosed("", 0)
		if err != nil {
			return err
		}
		defer c.Close()
		return c.RemoveTable()
	}
	var err error
	if a.cfg.NetNS != "" {
		err = netns.Do(a.cfg.NetNS, remove)
	} else {
		err = remove()
	}
	if err != nil {
		return fmt.Errorf("network policy off: remove the table an earlier run left: %w", err)
	}
	return nil
}

// plan makes the list of services Run runs, in the order /readyz reports
// them. The route service has found the underlay: the source registers
// its record, and the install writes its pod MTU.
func (a *Agent) plan(registered chan struct{}) []service {
	cfg := a.cfg
	src := service{name: "source", ready: a.src.Ready, first: registered}
	rec := a.routes.Record()
	if a.wg != nil {
		rec.WireGuardKey = a.wg.PublicKey()
	}
	self := clusterstate.NewSelf(rec)
	if a.wg != nil {
		// A rotated key goes into the record, and onto the device once
		// the datastore has it.
		a.wg.SetPublisher(publisher{self: self, view: a.view, node: cfg.Node})
	}
	src.run = func(ctx context.Context) error {
		return a.src.Run(ctx, self, sync.OnceFunc(func() { close(registered) }))
	}
	svcs := []service{src, {name: "routes", run: a.routes.Run, ready: a.routes.Ready, first: a.routes.FirstProgrammed()}}
	after := []<-chan struct{}{registered, a.routes.FirstProgrammed()}
	if a.wg != nil {
		svcs = append(svcs, service{name: "wireguard", run: a.wg.Run, ready: a.wg.Ready, first: a.wg.Up()})
		after = append(after, a.wg.Up())
	}
	if a.blocks != nil {
		svcs = append(svcs, service{name: "ipam-socket", run: a.blocks.Run, ready: a.blocks.Ready, first: a.blocks.ReadyC()})
		after = append(after, a.blocks.ReadyC())
	}
	if a.policy != nil {
		// Pods start only on a node whose policy is in place.
		svcs = append(svcs, service{name: "network-policy", run: a.policy.Run, ready: a.policy.Ready, first: a.policy.FirstApplied()},
			service{name: "policy-socket", run: a.admit.Run, ready: a.admit.Ready, first: a.admit.ReadyC()})
		after = append(after, a.policy.FirstApplied(), a.admit.ReadyC())
	}
	if a.capture != nil {
		// Flows gate nothing: a pod starts whether or not it is watched.
		svcs = append(svcs, service{name: "flows", run: a.capture.Run, ready: a.capture.Ready, first: a.capture.ReadyC()})
	}
	if cfg.Install != nil {
		sc := cniinstall.ServiceConfig{Node: cfg.Node, Mode: string(cfg.Mode), PodMTU: a.routes.PodMTU(), After: after, Logger: a.log}
		if a.admit != nil {
			sc.PolicySocket = a.cfg.PolicySocket
		}
		if cfg.Install.NodeCIDR != nil {
			sc.PodCIDRs = func() []netip.Prefix { return a.view.PodCIDRs(cfg.Node) }
			sc.PodCIDRsChanged = a.kube.OwnChanged()
		}
		in := cniinstall.NewService(cfg.Install, sc)
		svcs = append(svcs, service{name: "install", run: in.Run, ready: in.Ready, first: in.ReadyC()})
	}
	if cfg.GCInterval > 0 && a.ipamStore() != nil {
		gc := ipamgc.New(ipamgc.Config{Node: cfg.Node, Store: a.ipamStore(), Prefix: cfg.Prefix, Interval: cfg.GCInterval, Grace: cfg.GCGrace, BlockGrace: max(cfg.BlockGrace, 0),
			CacheDir: cfg.CacheDir, ReleaseDir: cfg.ReleaseDir, Metrics: a.gc, Logger: a.log})
		svcs = append(svcs, service{name: "ipam-gc", run: gc.Run, ready: gc.Ready})
	}
	if a.blocks != nil {
		rm := noderemoval.New(noderemoval.Config{Node: cfg.Node, Store: a.ipamStore(), Prefix: cfg.Prefix,
			Synced: a.kube.Synced(), Live: a.kube.LiveNodes, Indexed: a.kube.IndexedNodes, Logger: a.log})
		svcs = append(svcs, service{name: "node-removal", run: rm.Run, ready: rm.Ready})
	}
	return append(svcs, a.extra...)
}

// Run runs the agent's source and services until ctx ends or one of them
// fails: then the others are stopped and Run returns that failure, for
// the process to exit with it and be restarted. On return the routes,
// neighbours, FDB entries and the VXLAN device stay in place, and the
// node's lease is not revoked: pods keep working while the agent
// restarts.
func (a *Agent) Run(ctx context.Context) error {
	defer a.events.Shutdown()
	if err := a.routes.Setup(); err != nil {
		return err
	}
	defer a.routes.Close()
	if a.wg != nil {
		// Its failure (a key file that cannot be used) leaves the agent
		// running but not ready, with other nodes' pods unreachable.
		_ = a.wg.Setup(a.routes.UnderlayMTU())
		defer a.wg.Close()
	}
	var tables error
	if a.policy == nil {
		if tables = a.removePolicyTable(); tables != nil && !nftlayout.IsNewer(tables) {
			return tables
		}
	}
	registered := make(chan struct{})
	svcs := a.plan(registered)
	if tables != nil {
		// A newer podnet's table: left as it is, the agent not ready
		// until an operator settles which version runs here.
		a.log.Error("agent not ready: a table of a newer podnet is left as it is", "err", tables)
		svcs = append(svcs, service{name: "nftables", ready: func() error { return tables }, first: make(chan struct{}),
			run: func(ctx context.Context) error { <-ctx.Done(); return nil }})
	}
	a.mu.Lock()
	a.services = svcs
	a.mu.Unlock()
	g, ctx := errgroup.WithContext(ctx)
	for _, s := range svcs {
		g.Go(func() error {
			if err := s.run(ctx); err != nil {
				a.log.Error("service failed; the agent stops", "service", s.name, "err", err)
				return fmt.Errorf("%s: %w", s.name, err)
			}
			return nil
		})
	}
	g.Go(func() error {
		for _, s := range svcs {
			if s.first == nil {
				continue
			}
			select {
			case <-ctx.Done():
				return nil
			case <-s.first:
			}
		}
		close(a.ready)
		a.log.Info("agent ready")
		return nil
	})
	return g.Wait()
}

// status is one service's readiness, for /readyz.
type status struct {
	name string
	err  error
}

// readiness is every service's readiness, in the order Run started them.
func (a *Agent) readiness() []status {
	a.mu.Lock()
	svcs := a.services
	a.mu.Unlock()
	if svcs == nil {
		return []status{{"agent", errors.New("not started")}}
	}
	out := make([]status, len(svcs))
	for i, s := range svcs {
		out[i] = status{s.name, s.ready()}
	}
	return out
}

// Ready returns nil while every service is ready, and otherwise why the
// first one that is not is not, named.
func (a *Agent) Ready() error {
	for _, st := range a.readiness() {
		if st.err != nil {
			return fmt.Errorf("%s: not ready: %w", st.name, st.err)
		}
	}
	return nil
}

// ReadyC is closed the first time the agent is ready: every service has
// been ready once.
func (a *Agent) ReadyC() <-chan struct{} { return a.ready }
