package kubeblocks

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/podnet/podnet/agent/kubeevents"
	"github.com/podnet/podnet/ipam"
)

// TestReportInvalid: an invalid pool seen at every check is one Event;
// one mended (gone from the list) and broken again is another.
func TestReportInvalid(t *testing.T) {
	cs := fake.NewClientset()
	rec := kubeevents.NewForSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")}, "n1")
	defer rec.Shutdown()
	s := &Service{cfg: Config{Events: rec, Logger: slog.New(slog.DiscardHandler)}}
	bad := &ipam.InvalidPoolError{Name: "p", Key: "/podnet/pools/p", Err: errors.New(`nodeSelector "zone=a": not applied`)}
	var once kubeevents.Once
	s.reportInvalid(&once, []*ipam.InvalidPoolError{bad})
	s.reportInvalid(&once, []*ipam.InvalidPoolError{bad})
	if l := waitEvents(t, cs, 1); len(l) != 1 || l[0].Count != 1 {
		t.Fatalf("events after two checks of one invalid pool: %+v, want one", l)
	}
	s.reportInvalid(&once, nil) // mended
	s.reportInvalid(&once, []*ipam.InvalidPoolError{bad})
	list := waitEvents(t, cs, 2)
	if list[0].Count != 2 || list[0].InvolvedObject.Kind != "IPPool" || list[0].InvolvedObject.Name != "p" ||
		list[0].Reason != kubeevents.ReasonInvalidIPPool || !strings.Contains(list[0].Message, "zone=a") {
		t.Errorf("events: %+v, want one InvalidIPPool on IPPool p counted twice (reported, mended, broken again)", list)
	}
}

// waitEvents waits until the events count n in all (the recorder writes
// them in the background, a repeat as a count on the first).
func waitEvents(t *testing.T, cs *fake.Clientset, n int32) []corev1.Event {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, err := cs.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var sum int32
		for _, e := range l.Items {
			sum += e.Count
		}
		if sum >= n || time.Now().After(deadline) {
			return l.Items
		}
		time.Sleep(10 * time.Millisecond)
	}
}
