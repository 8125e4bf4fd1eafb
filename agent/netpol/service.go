package netpol

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/cache"

	"github.com/podnet/podnet/agent/kubeevents"
	"github.com/podnet/podnet/dataplane/policyrules"
	"github.com/podnet/podnet/flows"
	"github.com/podnet/podnet/policy"
)

// Defaults of Config.
const (
	// DefaultDebounce coalesces the events of one change (a Deployment's
	// pods, a namespace's policies applied together) into one compile
	// and one batch, at a cost of this much latency on the first event.
	DefaultDebounce = 10 * time.Millisecond
	// DefaultResyncInterval is how often the table is rewritten whole,
	// repairing anything changed behind the service's back.
	DefaultResyncInterval = time.Minute
)

// Backoff of a failed apply.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 10 * time.Second
)

// Config configures the policy service.
type Config struct {
	// Node is this node's name: the pods it enforces for are its.
	Node string
	// NetNS is the network namespace to program (a path); empty: the
	// process's own.
	NetNS string
	// SysctlRecord is where the original values of the sysctls the
	// service changes (bridge-nf-call-*) are recorded first
	// (internal/sysctlrecord); empty: not recorded.
	SysctlRecord string
	// Sources are the informers' list-watchers (NewSources).
	Sources Sources
	// Debounce is how long the first event of a change waits for more
	// (default DefaultDebounce), DeleteDebounce the same for pod
	// deletions (default DefaultDeleteDebounce); ResyncInterval how
	// often the table is rewritten whole (default
	// DefaultResyncInterval).
	Debounce, DeleteDebounce, ResyncInterval time.Duration
	// CRDRecheck is how often the service asks whether the API server
	// serves ClusterNetworkPolicies (default DefaultCRDRecheck).
	CRDRecheck time.Duration
	Registry   prometheus.Registerer
	Logger     *slog.Logger
	// DenyLog, when set, turns the deny log on: every pod chain logs
	// what it drops to this NFLOG group under the node's rate limit,
	// and the service writes one Info line per record to Logger.
	DenyLog *policyrules.DenyLog
	// FlowLog, when set, writes the flows' side of the table
	// (policyrules.WithFlowLabels: conntrack labels of the accepting
	// rules, drops logged for agent/flowcap).
	FlowLog *policyrules.FlowLog
	// FlowIndex, when set, is called with every IR the service is about
	// to apply, and its answer serves FlowRules (policyrules.FlowIndex:
	// the flow capture's rule ids).
	FlowIndex func(ir *policy.IR, node string) map[uint64][]flows.Rule
	// Events, when set, records the Events users see with kubectl: a
	// failed apply and the recovery on the Node, the opening of a pod a
	// plugin closed on the Pod (kubeevents).
	Events *kubeevents.Recorder
}

// renderer is what the service needs of policyrules.Renderer.
type renderer interface {
	Apply(*policy.IR) (policyrules.Stats, error)
	Resync(*policy.IR) (policyrules.Stats, error)
	Counters() (policyrules.Counters, error)
	Close() error
}

// dataplaneOpener opens the renderer and the lister of the node's own
// addresses in the node's network namespace; close releases both.
type dataplaneOpener func() (r renderer, localIPs func() ([]netip.Addr, error), close func(), err error)

// Service enforces NetworkPolicy for this node's pods (see the package
// documentation). Create it with New, run it with Run.
//
// Locking: mu guards what the loop shares with Admit and Ready; rmu
// serializes the renderer between the loop and the metrics collector.
// Neither is held while the other is taken.
type Service struct {
	cfg  Config
	log  *slog.Logger
	m    *metrics
	open dataplaneOpener
	// openLog binds the deny log's group (Config.DenyLog).
	openLog func() (logSource, error)

	// kick is signalled on every change of the caches that may change
	// the rules.
	kick chan struct{}
	// events is broadcast on every change of the caches (Admit waits for
	// its pod), applied after every successful apply.
	events, applied notifier
	// synced is closed once the informers have synced; the stores are
	// set before.
	synced                            chan struct{}
	policies, namespaces, pods, nodes cache.Indexer
	// share makes the cached pods share equal label maps and port lists.
	share        *shareTable
	firstApplied chan struct{}
	// reqGen counts the requests for a rebuild that must be waited for
	// (Admit); a reconcile that read n applied every request up to n.
	reqGen atomic.Uint64
	// cacheGen counts the changes of the caches (their events): an IR
	// compiled at cacheGen n is current while it is still n. eagerGen is
	// cacheGen at the last change that was not a pod's deletion (an IR
	// compiled at n lacks only pending deletions while eagerGen <= n);
	// eager says such a change, or an Admit, asked for the rebuild
	// since the loop last looked (deletions.go).
	cacheGen, eagerGen atomic.Uint64
	eager              atomic.Bool
	// summary is the last apply's, for Status: lock-free, never waiting.
	summary atomic.Pointer[Summary]
	// flowIndex serves FlowRules, lock-free (resolve.go).
	flowIndex atomic.Pointer[flowIndex]

	rmu sync.Mutex
	r   renderer // nil while Run is not running

	mu sync.Mutex
	// admitted are the addresses Admit was told for pods whose status
	// has none yet.
	admitted map[policy.PodKey][]netip.Addr
	// clusterPolicies is the ClusterNetworkPolicy informer's store while
	// it runs (clusterFollower), nil otherwise.
	clusterPolicies cache.Indexer
	ir              *policy.IR // the last applied
	appliedGen      uint64
	lastErr         error
	// irGen is the cacheGen ir's caches were read at; irAdmitted the
	// admitted addresses ir has (admit.go's fast way adds to them).
	irGen      uint64
	irAdmitted map[policy.PodKey][]netip.Addr
	// gone are the addresses of deleted pods, each with the cacheGen of
	// its deletion, until an applied compile read the caches after it.
	gone map[netip.Addr]uint64

	// applyState turns the loop's failures and successes into Events
	// on the Node when they change.
	applyState kubeevents.Transition
	// status writes the ClusterNetworkPolicies' Accepted condition (nil:
	// the sources cannot).
	status *statusWriter
}

// New returns the service, its metrics registered in cfg.Registry.
func New(cfg Config) *Service {
	if cfg.Debounce <= 0 {
		cfg.Debounce = DefaultDebounce
	}
	if cfg.DeleteDebounce <= 0 {
		cfg.DeleteDebounce = DefaultDeleteDebounce
	}
	if cfg.ResyncInterval <= 0 {
		cfg.ResyncInterval = DefaultResyncInterval
	}
	if cfg.CRDRecheck <= 0 {
		cfg.CRDRecheck = DefaultCRDRecheck
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Service{cfg: cfg, log: cfg.Logger.With("service", "network-policy"),
		kick: make(chan struct{}, 1), synced: make(chan struct{}), firstApplied: make(chan struct{}),
		admitted: map[policy.PodKey][]netip.Addr{}, gone: map[netip.Addr]uint64{}, share: newShareTable()}
	if cfg.Sources.ClusterPolicyStatus != nil {
		s.status = newStatusWriter(cfg.Sources.ClusterPolicyStatus, s.log)
	}
	s.open = s.openNetNS
	s.openLog = s.openDenyLog
	s.m = newMetrics(s)
	if cfg.Registry != nil {
		s.m.register(cfg.Registry)
	}
	return s
}

// FirstApplied is closed after the first successful apply.
func (s *Service) FirstApplied() <-chan struct{} { return s.firstApplied }

// Ready returns nil while the rules in the kernel are those of the
// caches' last state the service compiled: the informers have synced
// and the last apply succeeded. A failed apply makes it not ready until
// a retry succeeds.
func (s *Service) Ready() error {
	select {
	case <-s.synced:
	default:
		return errors.New("informers of NetworkPolicies, Namespaces, Pods and Nodes (and of ClusterNetworkPolicies, when served at start) not synced")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.lastErr != nil:
		return fmt.Errorf("policy not applied: %w", s.lastErr)
	case s.ir == nil:
		return errors.New("policy not applied yet")
	}
	return nil
}

// Run follows the cluster and keeps the node's policy table current until
// ctx ends. The table stays when it returns: the node's pods stay
// protected while the agent restarts. An informer or a renderer that
// cannot be set up ends Run with its error; a failed apply is retried
// with backoff and never ends it.
func (s *Service) Run(ctx context.Context) error {
	r, localIPs, closeDP, err := s.open()
	if err != nil {
		return err
	}
	defer closeDP()
	if s.cfg.DenyLog != nil {
		src, err := s.openLog()
		if err != nil {
			return fmt.Errorf("network policy: deny log: %w", err)
		}
		defer s.startDenyLog(src)()
	}
	s.rmu.Lock()
	s.r = r
	s.rmu.Unlock()
	defer func() {
		s.rmu.Lock()
		s.r = nil
		s.rmu.Unlock()
	}()
	infs, err := s.informers()
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, i := range infs {
		wg.Go(func() { i.RunWithContext(ctx) })
	}
	// ClusterNetworkPolicies, when the API server serves them now, are
	// waited for like the rest: a first apply without them would open
	// what their Admin rules close. When it does not, or cannot tell,
	// nothing waits for them, nor when their CRD goes before they synced.
	var cnp cache.SharedIndexInformer
	var cnpStopped <-chan struct{}
	if src := s.cfg.Sources; src.ClusterPolicies != nil && src.ClusterPoliciesServed != nil {
		f := &clusterFollower{s: s, lw: src.ClusterPolicies, served: src.ClusterPoliciesServed}
		if s.status != nil {
			wg.Go(func() { s.status.run(ctx) })
		}
		cnp, cnpStopped = f.check(ctx)
		wg.Go(func() { f.follow(ctx, s.cfg.CRDRecheck) })
	}
	for _, i := range infs {
		if !cache.WaitForCacheSync(ctx.Done(), i.HasSynced) {
			return nil // ctx ended
		}
	}
	if cnp != nil {
		wctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-cnpStopped:
				cancel()
			case <-wctx.Done():
			}
		}()
		cache.WaitForCacheSync(wctx.Done(), cnp.HasSynced)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
	}
	close(s.synced)
	s.loop(ctx, localIPs)
	return nil
}

// askRebuild asks for a rebuild.
func (s *Service) askRebuild() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
	s.events.broadcast()
}

// loop rebuilds at once, then after every change (debounced, but at
// once when an Admit waits), every ResyncInterval (whole), and after a
// failure (with backoff), until ctx ends.
func (s *Service) loop(ctx context.Context, localIPs func() ([]netip.Addr, error)) {
	resync := time.NewTicker(s.cfg.ResyncInterval)
	defer resync.Stop()
	var t loopTimers
	backoff := minBackoff
	full := false
	var since time.Time // the oldest change not applied yet
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-s.kick:
				if since.IsZero() {
					since = time.Now()
				}
				if !s.admitWaiting() {
					t.arm(s.debounceFor())
					continue
				}
				// A CNI ADD waits on this rebuild with the pod held
				// back: no debounce, which would add its length to the
				// ADD. Events coalesce anyway while a rebuild runs.
			case <-t.debounce:
			case <-t.retry:
			case <-resync.C:
				full = true
			}
		}
		t.debounce, t.retry = nil, nil
		s.eager.Store(false) // this rebuild reads every change asked for so far
		if err := s.reconcile(full, localIPs); err != nil {
			s.log.Warn("policy not applied", "err", err, "retry_in", backoff)
			s.applyFailed(err)
			t.retry = time.After(backoff)
			backoff = min(backoff*2, maxBackoff)
			continue
		}
		full, backoff = false, minBackoff
		s.applySucceeded()
		if !since.IsZero() {
			s.m.enforceLatency.Observe(time.Since(since).Seconds())
			since = time.Time{}
		}
		if s.deletionsPending() {
			// The handshake's fast way left pod deletions for their
			// batch.
			since = time.Now()
			t.arm(s.cfg.DeleteDebounce)
		}
	}
}

// loopTimers are the loop's: the debounce of the changes pending (when
// it ends), and the retry of a failed apply.
type loopTimers struct {
	debounce, retry <-chan time.Time
	debounceAt      time.Time
}

// arm makes the debounce end within d: sooner, never later.
func (t *loopTimers) arm(d time.Duration) {
	if at := time.Now().Add(d); t.debounce == nil || at.Before(t.debounceAt) {
		t.debounce, t.debounceAt = time.After(d), at
	}
}

// admitWaiting reports whether an Admit waits for a rebuild that has not
// started.
func (s *Service) admitWaiting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reqGen.Load() > s.appliedGen
}

// reconcile compiles the caches' current state for this node and applies
// it (or, with full, rewrites the table whole).
func (s *Service) reconcile(full bool, localIPs func() ([]netip.Addr, error)) error {
	if !full {
		if done, err := s.reconcileAdmitted(); done {
			return err
		}
	}
	gen, cacheGen := s.reqGen.Load(), s.cacheGen.Load()
	local, err := localIPs()
	if err != nil {
		s.fail(err)
		return fmt.Errorf("list the node's addresses: %w", err)
	}
	s.mu.Lock()
	admitted := maps.Clone(s.admitted)
	s.mu.Unlock()
	start := time.Now()
	snap, stale := buildSnapshot(contents{
		policies: s.policies.List(), namespaces: s.namespaces.List(), pods: s.pods.List(), nodes: s.nodes.List(),
		clusterPolicies: s.clusterPolicyList(),
	}, snapshotInput{node: s.cfg.Node, localIPs: local, admitted: admitted})
	s.share.sweep(snap.Pods, snap.Policies)
	ir := policy.Compile(snap, policy.Options{Node: s.cfg.Node})
	compiled := time.Now()
	s.m.compile.Observe(compiled.Sub(start).Seconds())
	s.publishFlowIndex(ir)
	op := "apply"
	s.rmu.Lock()
	var st policyrules.Stats
	if full {
		op = "resync"
		st, err = s.r.Resync(ir)
	} else {
		st, err = s.r.Apply(ir)
	}
	s.rmu.Unlock()
	s.m.apply.WithLabelValues(op).Observe(time.Since(compiled).Seconds())
	s.mu.Lock()
	for _, k := range stale {
		// Admit may have been told new addresses meanwhile (the pod
		// created again under its name): those stay.
		if slices.Equal(s.admitted[k], admitted[k]) {
			delete(s.admitted, k)
		}
	}
	s.mu.Unlock()
	if err != nil {
		s.fail(err)
		return err
	}
	s.mu.Lock()
	first := s.ir == nil
	s.ir, s.appliedGen, s.lastErr = ir, gen, nil
	s.irGen, s.irAdmitted = cacheGen, admitted
	s.forgetDeleted(cacheGen)
	s.mu.Unlock()
	s.applied.broadcast()
	if first {
		close(s.firstApplied)
	}
	s.m.observe(snap, ir)
	s.summary.Store(summarize(snap, ir))
	if st != (policyrules.Stats{}) || first {
		s.log.Debug("policy applied", "op", op, "isolated_pods", len(ir.Pods), "problems", len(ir.Problems),
			"stats", fmt.Sprintf("%+v", st), "took", time.Since(start))
	}
	return nil
}

func (s *Service) fail(err error) {
	s.m.applyErrors.Inc()
	s.mu.Lock()
	s.lastErr = err
	s.mu.Unlock()
}
