package bench

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/netplugin"
	"github.com/podnet/podnet/sandbox"
)

// Options describe one workload.
type Options struct {
	ConfDir  string   // network configs
	Network  string   // network name; empty: the first in ConfDir
	BinDirs  []string // plugins
	CacheDir string   // result cache (a temporary directory)
	Pods     int      // pods per phase
	Parallel int      // pods at a time in the parallel phase
	// HostPortBase: pod i gets hostPort HostPortBase+i mapped to its port
	// 80; 0 maps nothing.
	HostPortBase int
	// Loopback: how pods' lo comes up (default: the loopback plugin).
	Loopback netplugin.LoopbackMode
	// Host, when set, starts what runs beside the plugins on a node (an
	// agent) once the host namespace is made, given its path; the
	// workload starts when it returns, and stop ends it after the last
	// phase. Its errors are the run's.
	Host func(ctx context.Context, hostNetNS string) (stop func() error, err error)
	// Gone, when set, is told of each pod once its DEL has succeeded, as
	// a kubelet deletes the pod's object after its sandbox's tear-down:
	// what Host runs can forget the pod.
	Gone func(pod netplugin.PodRef)
}

// Phases is how many phases Run measures (sequential, then parallel).
const Phases = 2

// PodName is the name of the i-th pod of phase k (from 0): every pod of a
// run has its own name, as pods created one after another in a cluster
// do, so no pod comes back with another address while the cluster still
// knows it by its old one.
func PodName(phase, i, pods int) string { return fmt.Sprintf("pod-%d", phase*pods+i) }

// Namespace is the namespace of the workload's pods.
const Namespace = "podnet-bench"

// Phase is the outcome of one phase.
type Phase struct {
	Name     string
	Parallel int
	Add, Del Summary
	Wall     time.Duration // from the first ADD to the last DEL
}

// PodsPerSecond is the throughput of whole pod lifecycles (set-up and
// tear-down) in the phase.
func (p Phase) PodsPerSecond() float64 {
	if p.Wall <= 0 {
		return 0
	}
	return float64(p.Add.N) / p.Wall.Seconds()
}

// Run measures the workload: Pods pods one at a time, then Pods pods
// Parallel at a time. Every plugin runs in a host namespace made for the
// run; sandboxes are namespaces made for the run; all are removed at the
// end, whatever happens.
func Run(ctx context.Context, o Options) (phases []Phase, err error) {
	hostName := sandbox.NamePrefix + "bench-host-" + randomSuffix()
	hostPath, err := netns.NewNamed(hostName)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, netns.DeleteNamed(hostName)) }()
	if o.Host != nil {
		stop, err := o.Host(ctx, hostPath)
		if err != nil {
			return nil, fmt.Errorf("start the host's services: %w", err)
		}
		defer func() { err = errors.Join(err, stop()) }()
	}

	w := &workload{opts: o, netns: map[string]string{}}
	plugin := netplugin.NewCNIPlugin(o.ConfDir, o.BinDirs,
		netplugin.WithCacheDir(o.CacheDir),
		netplugin.WithDefaultNetwork(o.Network),
		netplugin.WithLoopback(cmp.Or(o.Loopback, netplugin.LoopbackPlugin)),
		netplugin.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		netplugin.WithRuntimeOptions(cni.WithExec(&cni.RawExec{HostNetNS: hostPath})))
	if err := plugin.Init(netplugin.InitConfig{Host: netplugin.HostFunc(w.netnsOf)}); err != nil {
		return nil, fmt.Errorf("network plugin %q failed init: %w", netplugin.CNIPluginName, err)
	}
	defer plugin.Close()
	if err := plugin.Status(); err != nil {
		return nil, fmt.Errorf("network not ready: %w", err)
	}
	if w.pm, err = netplugin.NewPluginManager(plugin, nil); err != nil {
		return nil, err
	}
	for k, par := range [Phases]int{1, max(1, o.Parallel)} {
		name := "sequential"
		if par > 1 {
			name = fmt.Sprintf("parallel=%d", par)
		}
		ph, err := w.phase(ctx, k, name, par)
		if err != nil {
			return phases, err
		}
		phases = append(phases, ph)
	}
	return phases, nil
}

type workload struct {
	opts Options
	pm   *netplugin.PluginManager

	mu    sync.Mutex
	netns map[string]string
}

func (w *workload) netnsOf(id string) (string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p, ok := w.netns[id]; ok {
		return p, nil
	}
	return "", fmt.Errorf("unknown sandbox %q", id)
}

// phase sets up and tears down Pods pods, par at a time. Namespaces are
// made before the clock starts: the runtime, not the network plugin,
// creates them.
func (w *workload) phase(ctx context.Context, k int, name string, par int) (Phase, error) {
	n := w.opts.Pods
	ids := make([]string, n)
	suffix := randomSuffix()
	defer func() {
		for _, id := range ids {
			if id != "" {
				_ = netns.DeleteNamed(id)
			}
		}
	}()
	for i := range ids {
		id := fmt.Sprintf("%sbench-%s-%d", sandbox.NamePrefix, suffix, i)
		path, err := netns.NewNamed(id)
		if err != nil {
			return Phase{}, err
		}
		ids[i] = id
		w.mu.Lock()
		w.netns[id] = path
		w.mu.Unlock()
	}
	// All pods are set up, then all torn down, par at a time: the node
	// holds n pods at the peak, as a real one does.
	pods := make([]netplugin.PodRef, n)
	for i := range pods {
		pods[i] = netplugin.PodRef{Namespace: Namespace, Name: PodName(k, i, n)}
	}
	start := time.Now()
	adds, err := parallel(n, par, func(i int) error {
		opts := &netplugin.PodOptions{}
		if w.opts.HostPortBase > 0 {
			opts.PortMappings = []netplugin.PortMapping{{HostPort: w.opts.HostPortBase + i, ContainerPort: 80, Protocol: "tcp"}}
		}
		_, err := w.pm.SetUpPod(ctx, pods[i], ids[i], opts)
		return err
	})
	// Tear-down runs whatever set-up did, so nothing is left behind.
	dels, delErr := parallel(n, par, func(i int) error {
		err := w.pm.TearDownPod(context.WithoutCancel(ctx), pods[i], ids[i])
		if err == nil && w.opts.Gone != nil {
			w.opts.Gone(pods[i])
		}
		return err
	})
	wall := time.Since(start)
	if err := errors.Join(err, delErr); err != nil {
		return Phase{}, err
	}
	return Phase{Name: name, Parallel: par, Add: Summarize(adds), Del: Summarize(dels), Wall: wall}, nil
}

// parallel runs fn(0..n-1), par at a time, and times each call.
func parallel(n, par int, fn func(i int) error) ([]time.Duration, error) {
	times := make([]time.Duration, n)
	errs := make([]error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				t0 := time.Now()
				errs[i] = fn(i)
				times[i] = time.Since(t0)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return times, errors.Join(errs...)
}

func randomSuffix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
