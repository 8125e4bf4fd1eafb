package netpol

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/podnet/podnet/policy"
)

func TestAcceptedCondition(t *testing.T) {
	pods := policy.ClusterPeer{Pods: &policy.PodsSelector{}}
	dns := policy.ClusterPeer{DomainNames: []string{"a.example", "*.b.example"}}
	cases := []struct {
		name   string
		p      policy.ClusterPolicy
		status metav1.ConditionStatus
		reason string
		says   []string
	}{
		{"plain", policy.ClusterPolicy{Egress: []policy.ClusterRule{{Peers: []policy.ClusterPeer{pods}}}},
			metav1.ConditionTrue, ReasonAccepted, nil},
		{"domain names", policy.ClusterPolicy{Egress: []policy.ClusterRule{{Peers: []policy.ClusterPeer{pods}}, {Name: "dns", Peers: []policy.ClusterPeer{pods, dns}}}},
			metav1.ConditionFalse, ReasonDomainNamesUnsupported, []string{"spec.egress[1] (dns)", "a.example, *.b.example"}},
		{"broken rule first", policy.ClusterPolicy{Ingress: []policy.ClusterRule{{Broken: "action \"X\""}}, Egress: []policy.ClusterRule{{Peers: []policy.ClusterPeer{dns}}}},
			metav1.ConditionFalse, ReasonInvalidRule, []string{"spec.ingress[0]", `action "X"`}},
		{"invalid", policy.ClusterPolicy{Invalid: "tier \"Middle\"", Egress: []policy.ClusterRule{{Peers: []policy.ClusterPeer{dns}}}},
			metav1.ConditionFalse, ReasonInvalid, []string{`tier "Middle"`}},
	}
	for _, tc := range cases {
		c := acceptedCondition(&tc.p, 7)
		if c.Type != ConditionAccepted || c.Status != tc.status || c.Reason != tc.reason || c.ObservedGeneration != 7 {
			t.Errorf("%s: %+v, want %s %s at generation 7", tc.name, c, tc.status, tc.reason)
		}
		for _, s := range tc.says {
			if !strings.Contains(c.Message, s) {
				t.Errorf("%s: message %q does not say %q", tc.name, c.Message, s)
			}
		}
	}
}

func TestWithCondition(t *testing.T) {
	t0, t1 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	other := metav1.Condition{Type: "Other", Status: metav1.ConditionTrue, Reason: "R", LastTransitionTime: metav1.NewTime(t0)}
	old := metav1.Condition{Type: ConditionAccepted, Status: metav1.ConditionFalse, Reason: ReasonDomainNamesUnsupported, LastTransitionTime: metav1.NewTime(t0)}
	want := metav1.Condition{Type: ConditionAccepted, Status: metav1.ConditionFalse, Reason: ReasonDomainNamesUnsupported, Message: "new"}
	got := withCondition([]metav1.Condition{other, old}, want, t1)
	if len(got) != 2 || got[0] != other || got[1].Message != "new" || !got[1].LastTransitionTime.Time.Equal(t0) {
		t.Errorf("same status: %+v, want Other kept and Accepted replaced with its transition time", got)
	}
	want.Status = metav1.ConditionTrue
	got = withCondition([]metav1.Condition{old}, want, t1)
	if len(got) != 1 || !got[0].LastTransitionTime.Time.Equal(t1) {
		t.Errorf("status changed: %+v, want the transition at %v", got, t1)
	}
	if got := withCondition(nil, want, t1); len(got) != 1 || got[0].Type != ConditionAccepted {
		t.Errorf("none before: %+v", got)
	}
	if !sameCondition(&got[0], want) {
		t.Error("sameCondition must not compare the time")
	}
	if sameCondition(nil, want) {
		t.Error("sameCondition(nil): want false")
	}
}

// TestStatusWriter: a policy is patched only when its status differs
// from podnet's condition, with its resource version as precondition; a
// conflict is left to the informer.
func TestStatusWriter(t *testing.T) {
	type call struct {
		name string
		body []byte
	}
	calls := make(chan call, 10)
	var fail atomic.Pointer[error]
	w := newStatusWriter(func(_ context.Context, name string, body []byte) error {
		calls <- call{name, body}
		if e := fail.Load(); e != nil {
			return *e
		}
		return nil
	}, slog.New(slog.DiscardHandler))
	w.jitter = 0
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	p := &clusterPolicyObj{rv: "12", generation: 3, ClusterPolicy: policy.ClusterPolicy{Name: "cnp",
		Egress: []policy.ClusterRule{{Peers: []policy.ClusterPeer{{DomainNames: []string{"x.example"}}}}}}}
	w.seen(p)
	var c call
	select {
	case c = <-calls:
	case <-time.After(5 * time.Second):
		t.Fatal("no patch")
	}
	var got struct {
		Metadata struct{ ResourceVersion string }
		Status   struct{ Conditions []metav1.Condition }
	}
	if err := json.Unmarshal(c.body, &got); err != nil {
		t.Fatal(err)
	}
	if c.name != "cnp" || got.Metadata.ResourceVersion != "12" || len(got.Status.Conditions) != 1 ||
		got.Status.Conditions[0].Reason != ReasonDomainNamesUnsupported || got.Status.Conditions[0].ObservedGeneration != 3 {
		t.Errorf("patch of %s: %s", c.name, c.body)
	}
	// The object now says it: nothing to write.
	p2 := *p
	p2.conditions = got.Status.Conditions
	w.seen(&p2)
	select {
	case c := <-calls:
		t.Errorf("patched again: %s", c.body)
	case <-time.After(100 * time.Millisecond):
	}
	conflict := error(apierrors.NewConflict(schema.GroupResource{Resource: ClusterPolicyResource}, "cnp", errors.New("rv")))
	fail.Store(&conflict)
	if err := w.write(ctx, p, time.Now()); err != nil {
		t.Errorf("conflict: %v, want nil (the informer brings the newer object)", err)
	}
	<-calls
}
