package k8s_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/podnet/podnet/test/k8s/cluster"
)

// burstSizes are the numbers of pods created at once. One pod alone is
// the baseline: what a pod's network costs when nothing else competes
// for the CPU.
var burstSizes = []int{1, 20, 50}

// burstChain is a pod network to benchmark: install puts it on a node
// that has none yet.
type burstChain struct {
	name    string
	install func(ctx context.Context, b *testing.B, c *cluster.Cluster)
}

// BenchmarkPodBurst creates N pods at once through the API (N = 1, 20,
// then 50) on a real single-node cluster, waits until every one is Running,
// then deletes them all at once and waits until every one is gone. It
// does so for podnet, deployed from deploy/kubernetes/etcd,
// and for the reference chain (containernetworking/plugins v1.9.1
// bridge + host-local + portmap, loopback), each on a fresh cluster of
// its own, one after the other. It reports per pod create->Running and
// delete->gone (timestamps taken by a watch on the pods, from the
// create or delete call), and containerd's CRI histograms of the CNI
// ADD (sandbox_create_network) and DEL (sandbox_delete_network) of the
// burst's sandboxes, as the difference of two scrapes. The table of
// both chains is logged at the end; docs/performance.md has a measured
// one.
//
// A benchmark, not a test: it asserts nothing about speed, and `go test`
// runs it only with -bench. As root (minutes: two clusters):
//
//	cd test/k8s && CI=true go test -run XXX -bench BenchmarkPodBurst -benchtime 1x -timeout 60m -v .
//
// -bench 'BenchmarkPodBurst/podnet' runs one chain; -benchtime 3x three
// bursts of each size on the same cluster (a row each).
func BenchmarkPodBurst(b *testing.B) {
	chains := []burstChain{
		{"podnet", installPodnet},
		{"reference", func(ctx context.Context, b *testing.B, c *cluster.Cluster) {
			if err := c.InstallReferenceChain(ctx, b.Logf); err != nil {
				b.Fatal(err)
			}
		}},
	}
	var rows []burstResult
	for _, ch := range chains {
		b.Run(ch.name, func(b *testing.B) {
			rows = append(rows, benchChain(b, ch)...)
		})
	}
	if len(rows) > 0 {
		b.Logf("pod bursts (create->Running and delete->gone per pod, from the API; CNI ADD/DEL from containerd's histograms):\n%s",
			burstTable(rows))
	}
}

// benchChain brings up a cluster, installs the chain, and runs one
// sub-benchmark per burst size on it.
func benchChain(b *testing.B, ch burstChain) []burstResult {
	c := cluster.Start(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	ch.install(ctx, b, c)
	waitNodeReady(ctx, b, c, c.Nodes[0].Name, 3*time.Minute)
	// One pod first, not measured: the first sandbox of a node pays for
	// what the next ones find ready (the pause image's snapshot, the
	// runtime's first CNI load, the network's bridge or tables).
	runBurst(ctx, b, c, ch.name, 1, "warmup")
	var rows []burstResult
	for _, n := range burstSizes {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			for range b.N {
				// Each burst's pods are named and labelled apart (-count
				// runs this function again for the same n).
				id := fmt.Sprintf("%d-%d", n, len(rows))
				rows = append(rows, runBurst(ctx, b, c, ch.name, n, id))
			}
			rows[len(rows)-1].report(b)
		})
	}
	return rows
}

// installPodnet deploys podnet's etcd variant, the one the figures in
// docs/performance.md were measured with: the shipped manifests,
// localized, created through the API.
func installPodnet(ctx context.Context, b *testing.B, c *cluster.Cluster) {
	if err := c.Deploy(ctx, cluster.Etcd, nil); err != nil {
		b.Fatal(err)
	}
}

// burstResult is what one burst measured.
type burstResult struct {
	chain string
	n     int
	// running and gone are per pod: create call to Running seen, delete
	// call to the pod's removal seen.
	running, gone []time.Duration
	// allRunning and allGone are from the first call to the last pod.
	allRunning, allGone time.Duration
	// netAdd, netDel and runcCreate are containerd's histograms over the
	// burst: CNI ADD of the sandboxes, their CNI DEL, and runc's part of
	// creating them.
	netAdd, netDel, runcCreate cluster.Histogram
}

// runBurst creates n pods at once, waits until they all run, deletes
// them at once and waits until they are all gone.
func runBurst(ctx context.Context, b *testing.B, c *cluster.Cluster, chain string, n int, id string) burstResult {
	pods := c.Client.CoreV1().Pods("default")
	w, err := pods.Watch(ctx, metav1.ListOptions{LabelSelector: "podnet-bench=" + id})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	pt := newPodTimes()
	go pt.follow(w)
	before := scrape(ctx, b, c)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("burst-%s-%03d", id, i)
	}
	r := burstResult{chain: chain, n: n}
	start := time.Now()
	parallel(names, func(name string) error {
		pt.mark(pt.created, name)
		_, err := pods.Create(ctx, burstPod(name, id), metav1.CreateOptions{})
		return err
	}, b)
	pt.wait(ctx, b, c, pt.running, names, "Running")
	r.allRunning = time.Since(start)
	running := waitCount(ctx, b, c, before, cluster.MetricSandboxCreateNetwork, n)
	start = time.Now()
	parallel(names, func(name string) error {
		pt.mark(pt.deleted, name)
		return pods.Delete(ctx, name, metav1.DeleteOptions{})
	}, b)
	pt.wait(ctx, b, c, pt.gone, names, "gone")
	r.allGone = time.Since(start)
	after := waitCount(ctx, b, c, running, cluster.MetricSandboxDeleteNetwork, n)
	r.running, r.gone = pt.durations(names)
	r.netAdd = running.Merged(cluster.MetricSandboxCreateNetwork).Sub(before.Merged(cluster.MetricSandboxCreateNetwork))
	r.runcCreate = running.Merged(cluster.MetricSandboxRuntimeCreate).Sub(before.Merged(cluster.MetricSandboxRuntimeCreate))
	r.netDel = after.Merged(cluster.MetricSandboxDeleteNetwork).Sub(running.Merged(cluster.MetricSandboxDeleteNetwork))
	b.Logf("%s, %d pods: all Running after %s, all gone %s after the deletes", chain, n,
		r.allRunning.Round(time.Millisecond), r.allGone.Round(time.Millisecond))
	return r
}

// parallel runs fn for every name at once, as many API calls in flight
// as pods (the client allows 100 a second, bursts of 200).
func parallel(names []string, fn func(string) error, b *testing.B) {
	var wg sync.WaitGroup
	errs := make([]error, len(names))
	for i, name := range names {
		wg.Go(func() { errs[i] = fn(name) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			b.Fatalf("pod %s: %v", names[i], err)
		}
	}
}

// burstPod is the smallest pod: one container running the pause image,
// no service account token, no service links, so that what it costs is
// the sandbox, its network and one container.
func burstPod(name, id string) *corev1.Pod {
	no := false
	grace := int64(2)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "podnet-bench", "podnet-bench": id}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "pause", Image: cluster.PauseImage, ImagePullPolicy: corev1.PullNever,
			}},
		},
	}
}

// scrape reads containerd's histograms.
func scrape(ctx context.Context, b *testing.B, c *cluster.Cluster) cluster.Histograms {
	hs, err := c.Nodes[0].ContainerdHistograms(ctx)
	if err != nil {
		b.Fatal(err)
	}
	return hs
}

// waitCount scrapes until the histogram called name has n more
// observations than in prev: containerd records one when the CNI call
// returns, which may be a moment after the API shows its effect.
func waitCount(ctx context.Context, b *testing.B, c *cluster.Cluster, prev cluster.Histograms, name string, n int) cluster.Histograms {
	deadline := time.Now().Add(30 * time.Second)
	for {
		hs := scrape(ctx, b, c)
		got := hs.Merged(name).Sub(prev.Merged(name)).Count
		if got >= float64(n) {
			return hs
		}
		if time.Now().After(deadline) {
			b.Logf("%s: %v observations over the burst, want %d; reporting those", name, got, n)
			return hs
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// podTimes are the moments a watch saw the burst's pods change.
type podTimes struct {
	mu                              sync.Mutex
	created, running, deleted, gone map[string]time.Time
	failed                          map[string]string
	closed                          bool
}

func newPodTimes() *podTimes {
	return &podTimes{created: map[string]time.Time{}, running: map[string]time.Time{},
		deleted: map[string]time.Time{}, gone: map[string]time.Time{}, failed: map[string]string{}}
}

func (pt *podTimes) mark(m map[string]time.Time, name string) {
	now := time.Now()
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if _, ok := m[name]; !ok {
		m[name] = now
	}
}

// follow records, from the watch's events, when each pod was first seen
// Running and when it was removed, and any pod that ended instead.
func (pt *podTimes) follow(w watch.Interface) {
	for ev := range w.ResultChan() {
		p, ok := ev.Object.(*corev1.Pod)
		if !ok {
			continue
		}
		switch {
		case ev.Type == watch.Deleted:
			pt.mark(pt.gone, p.Name)
		case p.Status.Phase == corev1.PodRunning:
			pt.mark(pt.running, p.Name)
		case p.DeletionTimestamp == nil && (p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded):
			// A deleted pod ends too (its container stops); only one
			// that ends on its own is a failure.
			pt.mu.Lock()
			pt.failed[p.Name] = podSummary(p)
			pt.mu.Unlock()
		}
	}
	pt.mu.Lock()
	pt.closed = true
	pt.mu.Unlock()
}

// wait waits until every pod is in m (Running or gone), failing if one
// of them ends, the watch ends, or ten minutes pass.
func (pt *podTimes) wait(ctx context.Context, b *testing.B, c *cluster.Cluster, m map[string]time.Time, names []string, what string) {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		pt.mu.Lock()
		var missing []string
		for _, name := range names {
			if _, ok := m[name]; !ok {
				missing = append(missing, name)
			}
		}
		failed, closed := len(pt.failed) > 0, pt.closed
		pt.mu.Unlock()
		switch {
		case len(missing) == 0:
			return
		case failed:
			b.Fatalf("pods ended: %v", pt.failed)
		case closed:
			b.Fatalf("the watch on the pods ended with %d not %s", len(missing), what)
		case time.Now().After(deadline):
			b.Fatalf("%d pods not %s after 10m: %s", len(missing), what, describePods(ctx, c, missing))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// durations are create->Running and delete->gone of each pod.
func (pt *podTimes) durations(names []string) (running, gone []time.Duration) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	for _, name := range names {
		running = append(running, pt.running[name].Sub(pt.created[name]))
		gone = append(gone, pt.gone[name].Sub(pt.deleted[name]))
	}
	return running, gone
}

func describePods(ctx context.Context, c *cluster.Cluster, names []string) string {
	var out []string
	for _, name := range names {
		p, err := c.Client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			out = append(out, name+": "+err.Error())
			continue
		}
		out = append(out, name+": "+podSummary(p))
	}
	return strings.Join(out, "; ")
}
