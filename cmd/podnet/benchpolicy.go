package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
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
	"github.com/podnet/podnet/cni"
)

// bench --policy: the node's policy service (agent/netpol with its
// first-packet handshake, the agent's own code) runs in the bench's host
// namespace, fed a fixed cluster instead of an API server, and podnet's
// network names its socket (policySocket), so every ADD asks it whether
// its pod may come up, as on a node that enforces NetworkPolicy.
const (
	benchNamespace = "podnet-bench" // bench.Run's pods' namespace
	benchNode      = "bench-node"
	benchPodLabel  = "bench"
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
	s := netpol.New(netpol.Config{Node: benchNode, NetNS: hostNetNS, Sources: bp.sources(), Logger: log, Registry: reg})
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
		for _, l := range m.GetLabel() {
			if l.GetName() == "answer" {
				answers[l.GetValue()] += m.GetHistogram().GetSampleCount()
			}
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
// its own histograms: the mean answer (admission), and the mean compile
// and apply of its rebuilds, each with its count.
func serviceTimes(mfs []*dto.MetricFamily) string {
	var out []string
	for _, name := range []string{"admission_duration_seconds", "compile_duration_seconds", "apply_duration_seconds"} {
		var n uint64
		var sum float64
		for _, m := range metricsOf(mfs, name) {
			n += m.GetHistogram().GetSampleCount()
			sum += m.GetHistogram().GetSampleSum()
		}
		if n > 0 {
			out = append(out, fmt.Sprintf("%s mean %.3f ms (%d)", strings.Split(name, "_")[0], sum/float64(n)*1e3, n))
		}
	}
	return strings.Join(out, ", ")
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

// sources is the fixed cluster: bench's namespace, its pods on this
// node (no addresses: ADD tells them), this node, and one policy.
func (bp *benchPolicy) sources() netpol.Sources {
	pods := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
	for i := range bp.pods {
		pods.Items = append(pods.Items, corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: benchNamespace, Name: fmt.Sprintf("pod-%d", i), ResourceVersion: "1",
				Labels: map[string]string{"app": benchPodLabel}},
			Spec:   corev1.PodSpec{NodeName: benchNode},
			Status: corev1.PodStatus{Phase: corev1.PodPending},
		})
	}
	selected := benchPodLabel
	if bp.mode == policyUnselected {
		selected = "not-" + benchPodLabel
	}
	port := intstr.FromInt32(80)
	policies := &networkingv1.NetworkPolicyList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: []networkingv1.NetworkPolicy{{
		ObjectMeta: metav1.ObjectMeta{Namespace: benchNamespace, Name: "bench", ResourceVersion: "1"},
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
		Name: benchNamespace, ResourceVersion: "1", Labels: map[string]string{"kubernetes.io/metadata.name": benchNamespace}}}}}
	nodes := &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: benchNode, ResourceVersion: "1"}}}}
	return netpol.Sources{
		Policies: fixedList{policies}, Namespaces: fixedList{namespaces}, Pods: fixedList{pods}, Nodes: fixedList{nodes},
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
