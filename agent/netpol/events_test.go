package netpol

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/podnet/podnet/agent/kubeevents"
)

// TestApplyEvents: a run of failed applies (retried with backoff) is one
// PolicyApplyFailed on the Node, the recovery one PolicyApplied, and the
// applies after it none.
func TestApplyEvents(t *testing.T) {
	c := newCluster(t)
	evs := fake.NewClientset()
	rec := kubeevents.NewForSink(&typedcorev1.EventSinkImpl{Interface: evs.CoreV1().Events("")}, self)
	defer rec.Shutdown()
	r := newRecorder()
	r.fail(errors.New("netlink: boom"))
	startService(t, c, r, Config{Events: rec})
	byReason := func() map[string][]corev1.Event {
		list, err := evs.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]corev1.Event{}
		for _, e := range list.Items {
			out[e.Reason] = append(out[e.Reason], e)
		}
		return out
	}
	wait := func(reason string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for len(byReason()[reason]) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("no %s event: %v", reason, byReason())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wait(kubeevents.ReasonPolicyApplyFailed)
	time.Sleep(500 * time.Millisecond) // retries at 100, 200 ms...
	r.fail(nil)
	wait(kubeevents.ReasonPolicyApplied)
	c.addPod(apiPod("x", "a", self, map[string]string{"app": "a"})) // an ordinary apply
	time.Sleep(300 * time.Millisecond)
	got := byReason()
	if f := got[kubeevents.ReasonPolicyApplyFailed]; len(f) != 1 || f[0].Count != 1 || f[0].Type != corev1.EventTypeWarning ||
		f[0].InvolvedObject.Kind != "Node" || f[0].InvolvedObject.Name != self || !strings.Contains(f[0].Message, "netlink: boom") {
		t.Errorf("PolicyApplyFailed events: %+v, want one on Node %s saying the error", f, self)
	}
	if ok := got[kubeevents.ReasonPolicyApplied]; len(ok) != 1 || ok[0].Count != 1 || ok[0].Type != corev1.EventTypeNormal {
		t.Errorf("PolicyApplied events: %+v, want one Normal", ok)
	}
}

func TestClosedOpenedMessage(t *testing.T) {
	since := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	m := closedOpenedMessage("n1", since, since.Add(90*time.Second))
	for _, want := range []string{"node n1", "2026-11-29T09:00:00Z", "1m30s", "open now"} {
		if !strings.Contains(m, want) {
			t.Errorf("message %q does not say %q", m, want)
		}
	}
}
