package netpol

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/podnet/podnet/agent/internal/sockserve"
	"github.com/podnet/podnet/agent/netpol/admitsock"
	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/policy"
)

// Defaults of AdmissionConfig.
const (
	// DefaultRescan is how often the closed table is read for pods a
	// plugin closed: while the agent was away (read at once when it
	// starts), or when its answer came too late.
	DefaultRescan = time.Second
	// listenGiveUp is how long the socket may fail to listen before the
	// service ends the agent.
	listenGiveUp = time.Minute
)

// AdmissionConfig configures the first-packet handshake's service.
type AdmissionConfig struct {
	// Socket is where the handshake is served (admitsock.DefaultSocket);
	// the lock file of the closed table is beside it.
	Socket string
	// Rescan defaults to DefaultRescan.
	Rescan time.Duration
}

// Admission serves the first-packet handshake (admitsock) of the node's
// CNI ADDs with Service.Admit, and opens the pods that plugins closed
// (dataplane.Closed) once Admit says their rules are in place or that no
// policy selects them. It is a service of its own beside the policy
// service, sharing its caches: the agent runs both.
type Admission struct {
	s   *Service
	cfg AdmissionConfig
	m   *admissionMetrics

	// rescan is signalled when a plugin is likely to have closed a pod
	// (an answer failed).
	rescan chan struct{}

	why       atomic.Pointer[error]
	ready     chan struct{}
	readyOnce sync.Once
}

// Admission returns the service of the handshake for s; its metrics go
// to s's registry.
func (s *Service) Admission(cfg AdmissionConfig) *Admission {
	if cfg.Socket == "" {
		cfg.Socket = admitsock.DefaultSocket
	}
	if cfg.Rescan <= 0 {
		cfg.Rescan = DefaultRescan
	}
	a := &Admission{s: s, cfg: cfg, m: newAdmissionMetrics(), rescan: make(chan struct{}, 1), ready: make(chan struct{})}
	a.notReady(errors.New("not started"))
	if s.cfg.Registry != nil {
		a.m.register(s.cfg.Registry)
	}
	return a
}

// Ready returns nil while the socket listens.
func (a *Admission) Ready() error {
	if p := a.why.Load(); p != nil {
		return *p
	}
	return nil
}

// ReadyC is closed the first time the socket listens: the plugins may
// be given its path.
func (a *Admission) ReadyC() <-chan struct{} { return a.ready }

func (a *Admission) notReady(err error) { a.why.Store(&err) }

func (a *Admission) markReady() {
	a.why.Store(nil)
	a.readyOnce.Do(func() { close(a.ready) })
}

// Run serves the socket and opens closed pods until ctx ends. A socket
// that stops serving is made again; one that cannot be made for a
// minute ends Run with the error, as does a closed table that cannot be
// opened.
func (a *Admission) Run(ctx context.Context) error {
	closed, err := a.openClosed()
	if err != nil {
		return err
	}
	defer closed.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { a.reopen(ctx, closed) })
	return a.serve(ctx)
}

// openClosed opens the closed table's connection in the node's
// namespace.
func (a *Admission) openClosed() (*dataplane.Closed, error) {
	var c *dataplane.Closed
	open := func() (err error) {
		c, err = dataplane.NewClosed(admitsock.ClosedLockPath(a.cfg.Socket), 0)
		return err
	}
	if err := a.s.inNodeNS(open); err != nil {
		return nil, fmt.Errorf("policy handshake: closed pods: %w", err)
	}
	return c, nil
}

// serve listens and serves until ctx ends, listening again when the
// socket stops.
func (a *Admission) serve(ctx context.Context) error {
	return sockserve.Loop{
		Path: a.cfg.Socket, What: "the first-packet handshake", Listen: admitsock.Listen,
		Serve: func(ctx context.Context, l net.Listener) error {
			return admitsock.Serve(ctx, l, a.answer, admitsock.Options{})
		},
		Ready: a.markReady, NotReady: a.notReady, GiveUp: listenGiveUp, Logger: a.s.log,
	}.Run(ctx)
}

// answer is the socket's handler: Admit, within the plugin's deadline.
func (a *Admission) answer(ctx context.Context, p admitsock.Pod) (bool, error) {
	start := time.Now()
	sel, err := a.s.Admit(ctx, p.Namespace, p.Name, p.Addrs)
	outcome := "not_selected"
	switch {
	case err != nil:
		outcome = "failed"
		// The plugin closes the pod now: look for it soon, not at the
		// next rescan.
		time.AfterFunc(50*time.Millisecond, a.kickRescan)
	case sel:
		outcome = "selected"
	}
	a.m.answers.WithLabelValues(outcome).Observe(time.Since(start).Seconds())
	return sel, err
}

func (a *Admission) kickRescan() {
	select {
	case a.rescan <- struct{}{}:
	default:
	}
}

// reopen reads the closed table at once, then every Rescan and when
// kicked, and admits each closed pod in the background: once Admit
// returns (the rules are in place, or no policy selects the pod), the
// pod's elements are removed, if they still name it. A pod whose
// elements go meanwhile (DEL) stops being waited for.
func (a *Admission) reopen(ctx context.Context, closed *dataplane.Closed) {
	r := &reopener{a: a, closed: closed, inflight: map[string]context.CancelFunc{}, since: map[string]time.Time{}, results: make(chan reopened)}
	tick := time.NewTicker(a.cfg.Rescan)
	defer tick.Stop()
	defer r.stop()
	r.scan(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case res := <-r.results:
			r.finish(ctx, res)
			continue
		case <-tick.C:
		case <-a.rescan:
		}
		r.scan(ctx)
	}
}

// reopener is reopen's state: the closed pods being admitted, and when
// each closed element was first found (its Event says how long the pod
// was closed).
type reopener struct {
	a        *Admission
	closed   *dataplane.Closed
	inflight map[string]context.CancelFunc
	since    map[string]time.Time
	results  chan reopened
}

// reopened is the outcome of one closed pod's Admit.
type reopened struct {
	key string
	p   dataplane.ClosedPod
	pod policy.PodKey
	err error
}

// scan reads the closed table: each closed pod not yet being admitted
// is, and one whose elements went (DEL or GC) stops being waited for.
func (r *reopener) scan(ctx context.Context) {
	pods, err := r.closed.List()
	if err != nil {
		r.a.s.log.Warn("closed pods not read", "err", err)
		return
	}
	r.a.m.closed.Set(float64(len(pods)))
	seen := map[string]bool{}
	for _, p := range pods {
		if p.Pod == "" {
			continue // not podnet's
		}
		k := closedKey(p)
		seen[k] = true
		if _, ok := r.inflight[k]; ok {
			continue
		}
		if _, ok := r.since[k]; !ok {
			r.since[k] = time.Now()
		}
		cctx, cancel := context.WithCancel(ctx)
		r.inflight[k] = cancel
		go func() {
			pod, err := r.a.admitClosed(cctx, p)
			r.results <- reopened{k, p, pod, err}
		}()
	}
	for k, cancel := range r.inflight {
		if !seen[k] {
			cancel() // gone: DEL or GC removed it
		}
	}
	for k := range r.since {
		if !seen[k] {
			delete(r.since, k)
		}
	}
}

// finish opens a pod its Admit has returned for, if its elements still
// name it.
func (r *reopener) finish(ctx context.Context, res reopened) {
	r.inflight[res.key]()
	delete(r.inflight, res.key)
	if res.err != nil {
		return // cancelled: gone, or the agent stops
	}
	opened, err := r.closed.Open(ctx, res.p)
	switch {
	case err != nil:
		r.a.s.log.Warn("closed pod not opened; retried at the next scan", "pod", res.p.Pod, "err", err)
	case opened:
		r.a.m.opened.Inc()
		r.a.s.log.Info("closed pod admitted and opened", "pod", res.p.Pod, "addresses", res.p.Addrs)
		r.a.s.closedOpened(res.pod, r.since[res.key])
		delete(r.since, res.key)
	}
}

// stop cancels the admissions in flight and waits for them.
func (r *reopener) stop() {
	for _, cancel := range r.inflight {
		cancel()
	}
	for range r.inflight {
		<-r.results
	}
}

func closedKey(p dataplane.ClosedPod) string {
	return fmt.Sprint(p.Pod, " ", p.Owner, " ", p.Addrs)
}

// admitClosed waits until the closed pod is admitted: it finds the pod
// (by name, or by the hash of a long one) and calls Admit with its
// addresses, with no deadline but ctx's.
func (a *Admission) admitClosed(ctx context.Context, p dataplane.ClosedPod) (policy.PodKey, error) {
	key, err := a.resolve(ctx, p.Pod)
	if err != nil {
		return key, err
	}
	_, err = a.s.Admit(ctx, key.Namespace, key.Name, p.Addrs)
	return key, err
}

// resolve returns the pod a closed element names.
func (a *Admission) resolve(ctx context.Context, ref string) (policy.PodKey, error) {
	if !strings.HasPrefix(ref, "sha256:") {
		ns, name, ok := strings.Cut(ref, "/")
		if !ok {
			return policy.PodKey{}, fmt.Errorf("closed pod %q: not namespace/name", ref)
		}
		return policy.PodKey{Namespace: ns, Name: name}, nil
	}
	select {
	case <-a.s.synced:
	case <-ctx.Done():
		return policy.PodKey{}, ctx.Err()
	}
	for {
		ch := a.s.events.wait()
		for _, o := range a.s.pods.List() {
			if p, ok := o.(*podObj); ok && p.Node == a.s.cfg.Node && dataplane.HashedPodRef(p.Key().String()) == ref {
				return p.Key(), nil
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return policy.PodKey{}, ctx.Err()
		}
	}
}

// admissionMetrics are the handshake's.
type admissionMetrics struct {
	answers *prometheus.HistogramVec
	closed  prometheus.Gauge
	opened  prometheus.Counter
}

func newAdmissionMetrics() *admissionMetrics {
	return &admissionMetrics{
		answers: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "admission_duration_seconds",
			Help:    "Time the agent took to answer a CNI ADD's first-packet handshake, by answer: selected (the pod's rules in place), not_selected, failed (the plugin then closes the pod).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}}, []string{"answer"}),
		closed: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "closed_pods",
			Help: "Attachments a plugin closed because the agent did not answer its handshake, as last read (table podnet-closed)."}),
		opened: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "closed_pods_opened_total",
			Help: "Closed attachments the agent opened once it had admitted their pods."}),
	}
}

func (m *admissionMetrics) register(r prometheus.Registerer) {
	r.MustRegister(m.answers, m.closed, m.opened)
}
