package kubeevents

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
)

func TestTransition(t *testing.T) {
	var tr Transition
	steps := []struct {
		fail bool
		msg  string
		news bool
	}{
		{false, "", false}, // success first: no recovery to tell
		{true, "a", true},
		{true, "a", false}, // the retry's same failure
		{true, "b", true},  // another error
		{false, "", true},  // recovered
		{false, "", false},
		{true, "a", true}, // failing again after a recovery
	}
	for i, s := range steps {
		var got bool
		if s.fail {
			got = tr.Fail(s.msg)
		} else {
			got = tr.Recover()
		}
		if got != s.news {
			t.Errorf("step %d (fail=%v %q): news %v, want %v", i, s.fail, s.msg, got, s.news)
		}
	}
}

func TestOnce(t *testing.T) {
	var o Once
	if !o.First("p@1") || o.First("p@1") {
		t.Fatal("p@1: want first once")
	}
	if !o.First("p@2") {
		t.Error("p@2: another revision is new")
	}
	o.Keep([]string{"p@2", "q@1"})
	if o.First("p@2") {
		t.Error("p@2 kept: not new")
	}
	if !o.First("p@1") {
		t.Error("p@1 forgotten by Keep: new again")
	}
	if !o.First("q@1") {
		t.Error("q@1 was never recorded: Keep must not invent it")
	}
}

// TestRecorder records through a fake clientset, as the agent does
// through the API server's: the Event names the object, the reason and
// podnet-agent on the node.
func TestRecorder(t *testing.T) {
	cs := fake.NewClientset()
	r := NewForSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")}, "n1")
	defer r.Shutdown()
	r.Event(IPPoolRef("pool-a"), corev1.EventTypeWarning, ReasonInvalidIPPool, "bad")
	r.Event(PodRef("ns", "p", "u1"), corev1.EventTypeWarning, ReasonClosedAgentUnreachable, "closed")
	r.Event(r.Node(), corev1.EventTypeNormal, ReasonPolicyApplied, "ok")
	want := map[string]string{"IPPool/pool-a": "default", "Pod/p": "ns", "Node/n1": "default"}
	deadline := time.Now().Add(10 * time.Second)
	for {
		evs, err := cs.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, e := range evs.Items {
			if e.Source.Component != Component || e.Source.Host != "n1" {
				t.Errorf("event %s: source %+v", e.Name, e.Source)
			}
			got[e.InvolvedObject.Kind+"/"+e.InvolvedObject.Name] = e.Namespace
		}
		if len(got) == len(want) {
			for k, ns := range want {
				if got[k] != ns {
					t.Errorf("event on %s in namespace %q, want %q", k, got[k], ns)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("events %v, want on %v", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestNilRecorder(t *testing.T) {
	var r *Recorder
	r.Event(r.Node(), corev1.EventTypeWarning, ReasonPolicyApplyFailed, "x")
	r.Shutdown()
}
