package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/podnet/podnet/agent/netpol"
	"github.com/podnet/podnet/bench"
	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/netplugin"
)

// bench --policy: the node's policy service (agent/netpol with its
// first-packet handshake, the agent's own code) runs in the bench's host
// namespace, fed a fixed cluster instead of an API server, and podnet's
// network names its socket (policySocket), so every ADD asks it whether
// its pod may come up, as on a node that enforces NetworkPolicy.
const (
	benchNode     = "bench-node"
	benchPodLabel = "bench"
)

// Policy modes of bench.
const (
	policyOff        = ""
	policySelected   = "selected"   // a NetworkPolicy selects every pod: ADD waits for its rules
	policyUnselected = "unselected" // the namespace has a NetworkPolicy that selects none of them
)

// benchPolicy is the policy service of one bench chain.
type benchPolicy struct {
	mode   string
	pods   int
	socket string

	mu      sync.Mutex
	current *podSource // the running service's pods
}

// withPolicySocket copies podnet's network (network, or the first in
// confDir, as bench picks it) into dir with policySocket set in its
// podnet plugins.
func withPolicySocket(confDir, network, dir, socket string) error {
	d, err := cni.LoadDir(confDir)
	if err != nil {
		return err
	}
	var list *cni.NetworkConfigList
	switch {
	case network != "":
		list = d.Network(network)
	case len(d.Networks) > 0:
		list = d.Networks[0]
	}
	if list == nil {
		return fmt.Errorf("--policy: no network %q in %s", network, confDir)
	}
	var doc map[string]any
	if err := json.Unmarshal(list.Bytes, &doc); err != nil {
		return fmt.Errorf("--policy: %s: %w", list.Path, err)
	}
	plugins, _ := doc["plugins"].([]any)
	found := false
	for _, p := range plugins {
		if pm, _ := p.(map[string]any); pm != nil && pm["type"] == "podnet" {
			pm["policySocket"] = socket
			found = true
		}
	}
	if !found {
		return fmt.Errorf("--policy: network %q (%s) has no podnet plugin to ask the policy service", list.Name, list.Path)
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, filepath.Base(list.Path)), out, 0o644)
}

// start runs the service and its handshake in hostNetNS and returns once
// both serve and the first rules are in place.
func (bp *benchPolicy) start(ctx context.Context, hostNetNS string) (func() error, error) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := prometheus.NewRegistry()
	pods := bp.podSource()
	bp.mu.Lock()
	bp.current = pods
	bp.mu.Unlock()
	s := netpol.New(netpol.Config{Node: benchNode, NetNS: hostNetNS, Sources: bp.sources(pods), Logger: log, Registry: reg})
	adm := s.Admission(netpol.AdmissionConfig{Socket: bp.socket})
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	errs := make(chan error, 2)
	go func() { errs <- s.Run(ctx) }()
	go func() { errs <- adm.Run(ctx) }()
	stop := func() error {
		cancel()
		err := errors.Join(<-errs, <-errs)
		if errors.Is(err, context.Canceled) {
			err = nil
		}
		mfs, gerr := reg.Gather()
		if gerr != nil {
			return errors.Join(err, gerr)
		}
		fmt.Fprintf(os.Stderr, "podnet bench: policy service (%s): %s\n", bp.mode, serviceTimes(mfs))
		return errors.Join(err, bp.checkAnswers(mfs))
	}
	ready := time.After(30 * time.Second)
	for _, ch := range []<-chan struct{}{s.FirstApplied(), adm.ReadyC()} {
		select {
		case <-ch:
		case err := <-errs:
			errs <- err // stop reads two
			return nil, errors.Join(fmt.Errorf("policy service: %w", err), stop())
		case <-ready:
			return nil, errors.Join(fmt.Errorf("policy service not ready in 30 s: %v, %v", s.Ready(), adm.Ready()), stop())
		}
	}
	return stop, nil
}

// checkAnswers fails the run unless the service answered every ADD of
// both phases as the mode says: a pod that got no answer was closed, and
// its ADD timed something else.
func (bp *benchPolicy) checkAnswers(mfs []*dto.MetricFamily) error {
	answers := map[string]uint64{}
	for _, m := range metricsOf(mfs, "admission_duration_seconds") {
		if a := labelOf(m, "answer"); a != "" {
			answers[a] += m.GetHistogram().GetSampleCount()
		}
	}
	want := "selected"
	if bp.mode == policyUnselected {
		want = "not_selected"
	}
	if n := 2 * uint64(bp.pods); answers[want] != n || len(answers) != 1 {
		return fmt.Errorf("policy service: %d ADDs should each have been answered %s; the answers were %v", n, want, answers)
	}
	return nil
}

// serviceTimes is where the service's share of the handshake went, from
// its own histograms: the mean answer (admission), compile, and apply of
// each kind (admit: an answer without a compile; apply, resync: after
// one), each with its count.
func serviceTimes(mfs []*dto.MetricFamily) string {
	var out []string
	for _, name := range []string{"admission_duration_seconds", "compile_duration_seconds", "apply_duration_seconds"} {
		type acc struct {
			n   uint64
			sum float64
		}
		byOp := map[string]*acc{}
		for _, m := range metricsOf(mfs, name) {
			op := labelOf(m, "op")
			if op != "" {
				op = " " + op
			}
			if byOp[op] == nil {
				byOp[op] = &acc{}
			}
			byOp[op].n += m.GetHistogram().GetSampleCount()
			byOp[op].sum += m.GetHistogram().GetSampleSum()
		}
		for _, op := range slices.Sorted(maps.Keys(byOp)) {
			if a := byOp[op]; a.n > 0 {
				out = append(out, fmt.Sprintf("%s%s mean %.3f ms (%d)", strings.Split(name, "_")[0], op, a.sum/float64(a.n)*1e3, a.n))
			}
		}
	}
	return strings.Join(out, ", ")
}

// labelOf is the value of m's label name, empty when it has none.
func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// metricsOf returns the metrics of the service's family whose name ends
// in suffix (the service's names carry its namespace and subsystem).
func metricsOf(mfs []*dto.MetricFamily, suffix string) []*dto.Metric {
	var out []*dto.Metric
	for _, mf := range mfs {
		if strings.HasSuffix(mf.GetName(), suffix) {
			out = append(out, mf.GetMetric()...)
		}
	}
	return out
}

// gone is bench's word that a pod's DEL is done: the cluster deletes it.
func (bp *benchPolicy) gone(pod netplugin.PodRef) {
	bp.mu.Lock()
	pods := bp.current
	bp.mu.Unlock()
	if pods != nil {
		pods.delete(pod.Name)
	}
}

// podSource is the cluster's pods of one run: every pod of every phase,
// on this node, without addresses (ADD tells them), each deleted once
// its DEL is done.
func (bp *benchPolicy) podSource() *podSource {
	src := &podSource{list: &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}, rv: 1, buffer: bench.Phases*bp.pods + 16}
	for k := range bench.Phases {
		for i := range bp.pods {
			src.list.Items = append(src.list.Items, corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: bench.Namespace, Name: bench.PodName(k, i, bp.pods), ResourceVersion: "1",
					Labels: map[string]string{"app": benchPodLabel}},
				Spec:   corev1.PodSpec{NodeName: benchNode},
				Status: corev1.PodStatus{Phase: corev1.PodPending},
			})
		}
	}
	return src
}

// sources is the cluster: bench's namespace, its pods, this node, and one
// policy.
func (bp *benchPolicy) sources(pods *podSource) netpol.Sources {
	selected := benchPodLabel
	if bp.mode == policyUnselected {
		selected = "not-" + benchPodLabel
	}
	port := intstr.FromInt32(80)
	policies := &networkingv1.NetworkPolicyList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: []networkingv1.NetworkPolicy{{
		ObjectMeta: metav1.ObjectMeta{Namespace: bench.Namespace, Name: "bench", ResourceVersion: "1"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": selected}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: &port}},
			}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		},
	}}}
	namespaces := &corev1.NamespaceList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: []corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{
		Name: bench.Namespace, ResourceVersion: "1", Labels: map[string]string{"kubernetes.io/metadata.name": bench.Namespace}}}}}
	nodes := &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: benchNode, ResourceVersion: "1"}}}}
	return netpol.Sources{
		Policies: fixedList{policies}, Namespaces: fixedList{namespaces}, Pods: pods, Nodes: fixedList{nodes},
	}
}

// fixedList is a list that never changes: its watch reports nothing until
// it is stopped.
type fixedList struct{ list runtime.Object }

var _ cache.ListerWatcher = fixedList{}

func (f fixedList) List(metav1.ListOptions) (runtime.Object, error) {
	return f.list.DeepCopyObject(), nil
}

func (f fixedList) Watch(metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil }

// IsWatchListSemanticsUnSupported tells the reflector to list, then
// watch (a list can send no initial events).
func (fixedList) IsWatchListSemanticsUnSupported() bool { return true }

// podSource lists the run's pods and reports their deletions.
type podSource struct {
	buffer int

	mu    sync.Mutex
	list  *corev1.PodList
	rv    int
	watch *podWatch // the reflector's current watch, if any
}

var _ cache.ListerWatcher = (*podSource)(nil)

func (p *podSource) List(metav1.ListOptions) (runtime.Object, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.list.DeepCopy(), nil
}

func (p *podSource) Watch(metav1.ListOptions) (watch.Interface, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	// Large enough for every pod's deletion: delete never waits for the
	// reflector.
	p.watch = &podWatch{ch: make(chan watch.Event, p.buffer)}
	return p.watch, nil
}

// IsWatchListSemanticsUnSupported: as fixedList's.
func (*podSource) IsWatchListSemanticsUnSupported() bool { return true }

func (p *podSource) delete(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, pod := range p.list.Items {
		if pod.Name != name {
			continue
		}
		p.rv++
		gone := pod.DeepCopy()
		gone.ResourceVersion = strconv.Itoa(p.rv)
		p.list.Items = slices.Delete(p.list.Items, i, i+1)
		p.list.ResourceVersion = gone.ResourceVersion
		if p.watch != nil {
			p.watch.send(watch.Event{Type: watch.Deleted, Object: gone})
		}
		return
	}
}

// podWatch is a watch the reflector may stop while a deletion is sent.
type podWatch struct {
	mu      sync.Mutex
	ch      chan watch.Event
	stopped bool
}

func (w *podWatch) ResultChan() <-chan watch.Event { return w.ch }

func (w *podWatch) Stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.stopped = true
		close(w.ch)
	}
}

// send never blocks: the channel holds every pod's deletion.
func (w *podWatch) send(ev watch.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		select {
		case w.ch <- ev:
		default:
		}
	}
}
