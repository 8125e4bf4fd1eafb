package netplugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/podnet/podnet/cni"
	internaltest "github.com/podnet/podnet/internal/testutil"
)

// fakePlugin tracks how many operations run at once per pod and overall;
// it tests the manager's locking and bookkeeping, not networking.
type fakePlugin struct {
	// hold, when set, is called inside every operation, while it counts
	// as running: a test holds an operation there to see what else may
	// run meanwhile.
	hold    func(pod PodRef)
	fail    map[string]error // by pod name
	mu      sync.Mutex
	active  map[string]int
	maxPer  int
	maxAll  atomic.Int32
	running atomic.Int32
}

func (f *fakePlugin) enter(pod PodRef) func() {
	f.mu.Lock()
	if f.active == nil {
		f.active = map[string]int{}
	}
	f.active[pod.Name]++
	if f.active[pod.Name] > f.maxPer {
		f.maxPer = f.active[pod.Name]
	}
	f.mu.Unlock()
	n := f.running.Add(1)
	for {
		m := f.maxAll.Load()
		if n <= m || f.maxAll.CompareAndSwap(m, n) {
			break
		}
	}
	if f.hold != nil {
		f.hold(pod)
	}
	return func() {
		f.running.Add(-1)
		f.mu.Lock()
		f.active[pod.Name]--
		f.mu.Unlock()
	}
}

func (f *fakePlugin) Init(InitConfig) error        { return nil }
func (f *fakePlugin) Event(string, map[string]any) {}
func (f *fakePlugin) Name() string                 { return "fake" }
func (f *fakePlugin) Capabilities() []Capability   { return nil }
func (f *fakePlugin) Status() error                { return nil }
func (f *fakePlugin) Close() error                 { return nil }
func (f *fakePlugin) SetUpPod(_ context.Context, pod PodRef, _ string, _ *PodOptions) (*PodNetworkStatus, error) {
	defer f.enter(pod)()
	if err := f.fail[pod.Name]; err != nil {
		return nil, err
	}
	return &PodNetworkStatus{}, nil
}
func (f *fakePlugin) TearDownPod(_ context.Context, pod PodRef, _ string) error {
	defer f.enter(pod)()
	return f.fail[pod.Name]
}
func (f *fakePlugin) GetPodNetworkStatus(_ context.Context, pod PodRef, _ string) (*PodNetworkStatus, error) {
	defer f.enter(pod)()
	return &PodNetworkStatus{}, f.fail[pod.Name]
}

func TestManagerSerializesOnePodAndParallelizesPods(t *testing.T) {
	// Pod a's first set-up is held inside the plugin while a tear-down of
	// a queues for a's lock and pod b is set up: b must not wait for a,
	// and a's tear-down must not enter while a's set-up is inside.
	inside, release := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	f := &fakePlugin{hold: func(pod PodRef) {
		if pod.Name == "a" && held.CompareAndSwap(false, true) {
			close(inside)
			<-release
		}
	}}
	pm, err := NewPluginManager(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, b := PodRef{Namespace: "ns", Name: "a"}, PodRef{Namespace: "ns", Name: "b"}
	var wg sync.WaitGroup
	defer wg.Wait()
	var once sync.Once
	releaseA := func() { once.Do(func() { close(release) }) }
	defer releaseA()
	wg.Go(func() { _, _ = pm.SetUpPod(ctx, a, "id", nil) })
	<-inside
	wg.Go(func() { _ = pm.TearDownPod(ctx, a, "id") })
	internaltest.Eventually(t, "a's tear-down waiting for a's lock", 10*time.Second, func() bool { return pm.locks.users(podKey(a)) == 2 })
	bDone := make(chan error, 1)
	go func() { _, err := pm.SetUpPod(ctx, b, "id", nil); bDone <- err }()
	select {
	case err := <-bDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("pod b's set-up waited for pod a's")
	}
	releaseA()
	wg.Wait()

	// Then many operations on ten pods at once, for the race detector
	// and the lock map's bookkeeping.
	for i := 0; i < 50; i++ {
		pod := PodRef{Namespace: "ns", Name: fmt.Sprintf("pod-%d", i%10)}
		wg.Add(3)
		go func() { defer wg.Done(); _, _ = pm.SetUpPod(ctx, pod, "id", nil) }()
		go func() { defer wg.Done(); _, _ = pm.GetPodNetworkStatus(ctx, pod, "id") }()
		go func() { defer wg.Done(); _ = pm.TearDownPod(ctx, pod, "id") }()
	}
	wg.Wait()
	if f.maxPer != 1 {
		t.Errorf("one pod's operations interleaved: %d at once", f.maxPer)
	}
	if f.maxAll.Load() < 2 {
		t.Errorf("different pods never ran in parallel")
	}
	if n := pm.locks.size(); n != 0 {
		t.Errorf("%d pod locks left behind", n)
	}
}

func TestManagerMetricsAndErrors(t *testing.T) {
	boom := cni.Errorf(cni.CodeTryAgainLater, "store unreachable")
	f := &fakePlugin{fail: map[string]error{"bad": boom}}
	reg := prometheus.NewRegistry()
	pm, err := NewPluginManager(f, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	good, bad := PodRef{Namespace: "default", Name: "good"}, PodRef{Namespace: "default", Name: "bad"}
	for i := 0; i < 3; i++ {
		if _, err := pm.SetUpPod(ctx, good, "g", nil); err != nil {
			t.Fatal(err)
		}
	}
	_, err = pm.SetUpPod(ctx, bad, "b", nil)
	if err == nil || err.Error() != `NetworkPlugin fake failed to set up pod "bad_default" network: store unreachable` {
		t.Errorf("error %q", err)
	}
	if !errors.Is(err, boom) || cni.CodeOf(err) != cni.CodeTryAgainLater {
		t.Errorf("wrapped error lost its CNI code: %v", err)
	}
	err = pm.TearDownPod(ctx, bad, "b")
	if err == nil || !strings.HasPrefix(err.Error(), `NetworkPlugin fake failed to teardown pod "bad_default" network: `) {
		t.Errorf("teardown error %q", err)
	}
	_, err = pm.GetPodNetworkStatus(ctx, good, "g")
	if err != nil {
		t.Fatal(err)
	}
	_, err = pm.GetPodNetworkStatus(ctx, bad, "b")
	if err == nil || !strings.HasPrefix(err.Error(), `NetworkPlugin fake failed on the status hook for pod "bad_default": `) {
		t.Errorf("status error %q", err)
	}

	want := map[string][2]float64{ // total, errors
		OpSetUpPod: {4, 1}, OpTearDownPod: {1, 1}, OpGetPodNetworkStatus: {2, 1},
	}
	for op, w := range want {
		if got := testutil.ToFloat64(pm.metrics.total.WithLabelValues(op)); got != w[0] {
			t.Errorf("%s total = %v, want %v", op, got, w[0])
		}
		if got := testutil.ToFloat64(pm.metrics.errors.WithLabelValues(op)); got != w[1] {
			t.Errorf("%s errors = %v, want %v", op, got, w[1])
		}
	}
	// The names are kubelet's, and the histogram counted every call.
	n, err := testutil.GatherAndCount(reg, "kubelet_network_plugin_operations_total", "kubelet_network_plugin_operations_errors_total", "kubelet_network_plugin_operations_duration_seconds")
	if err != nil || n != 9 {
		t.Errorf("gathered %d series, err %v; want 9", n, err)
	}
	expected := `
# HELP kubelet_network_plugin_operations_total Cumulative number of network plugin operations by operation type.
# TYPE kubelet_network_plugin_operations_total counter
kubelet_network_plugin_operations_total{operation_type="get_pod_network_status"} 2
kubelet_network_plugin_operations_total{operation_type="set_up_pod"} 4
kubelet_network_plugin_operations_total{operation_type="tear_down_pod"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expected), "kubelet_network_plugin_operations_total"); err != nil {
		t.Error(err)
	}
	// A second manager on the same registry is a clear error, not a panic.
	if _, err := NewPluginManager(f, reg); err == nil {
		t.Error("duplicate registration accepted")
	}
}

func TestPodLocksRelease(t *testing.T) {
	var l podLocks
	unlockA := l.lock("a")
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.lock("a")()
	}()
	internaltest.Eventually(t, "the second lock queued", 10*time.Second, func() bool { return l.users("a") == 2 })
	select {
	case <-done:
		t.Fatal("second lock of the same pod did not wait")
	default:
	}
	l.lock("b")() // another pod does not wait
	unlockA()
	<-done
	if l.size() != 0 {
		t.Errorf("%d locks left", l.size())
	}
}
