package main

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/podnet/podnet/bench"
	"github.com/podnet/podnet/netplugin"
)

// TestBenchPodSource: the bench's cluster lists every pod of both phases
// under the names bench gives them, and a pod whose DEL is done is
// deleted: gone from the list and reported on the watch, with a newer
// resource version; a deletion after the watch stopped is dropped.
func TestBenchPodSource(t *testing.T) {
	bp := &benchPolicy{mode: policySelected, pods: 3}
	src := bp.podSource()
	bp.current = src
	names := func() map[string]bool {
		obj, _ := src.List(metav1.ListOptions{})
		m := map[string]bool{}
		for _, p := range obj.(*corev1.PodList).Items {
			m[p.Name] = true
		}
		return m
	}
	all := names()
	for k := range bench.Phases {
		for i := range 3 {
			if !all[bench.PodName(k, i, 3)] {
				t.Errorf("pod %s not listed: %v", bench.PodName(k, i, 3), all)
			}
		}
	}
	if len(all) != bench.Phases*3 {
		t.Errorf("listed %d pods, want %d", len(all), bench.Phases*3)
	}
	w, _ := src.Watch(metav1.ListOptions{})
	gone := bench.PodName(1, 2, 3)
	bp.gone(netplugin.PodRef{Namespace: bench.Namespace, Name: gone})
	ev := <-w.ResultChan()
	p, _ := ev.Object.(*corev1.Pod)
	if ev.Type != watch.Deleted || p == nil || p.Name != gone || p.ResourceVersion == "1" {
		t.Errorf("event %v %+v, want the deletion of %s with a new resource version", ev.Type, p, gone)
	}
	if names()[gone] {
		t.Errorf("%s still listed after its deletion", gone)
	}
	w.Stop()
	bp.gone(netplugin.PodRef{Namespace: bench.Namespace, Name: bench.PodName(0, 0, 3)}) // must not panic
	if _, ok := <-w.ResultChan(); ok {
		t.Error("an event after the watch stopped")
	}
}
