package kubeapi

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/podnet/podnet/agent/clusterstate"
)

func TestUnreadableAnnotations(t *testing.T) {
	for _, tc := range []struct {
		name string
		ann  map[string]string
		want string // in the error; "" none
	}{
		{"none", nil, ""},
		{"format 1", map[string]string{AnnotationFormat: "1", AnnotationUnderlayAddress: "198.18.0.11"}, ""},
		{"unknown key", map[string]string{AnnotationPrefix + "future": "x", AnnotationUnderlayAddress: "198.18.0.11"}, ""},
		{"newer format", map[string]string{AnnotationFormat: "2"}, `podnet.io/format "2": a newer podnet's format`},
		{"bad format", map[string]string{AnnotationFormat: "v2"}, `podnet.io/format "v2"`},
		{"address", map[string]string{AnnotationUnderlayAddress: "198.18.0.11:4789"}, `podnet.io/underlay-address "198.18.0.11:4789"`},
		{"mac", map[string]string{AnnotationVTEPMAC: "02:aa"}, `podnet.io/vtep-mac "02:aa"`},
		{"link-local", map[string]string{AnnotationLinkLocal6: "fd00::1"}, `podnet.io/link-local6 "fd00::1"`},
	} {
		err := UnreadableAnnotations(kubeNode("b", tc.ann, []string{"198.18.0.12"}))
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestOtherNodeUnreadable: another node's event in a format this agent
// cannot read changes nothing in the view (its last readable record
// stays, a node never read stays out) and is logged once; this node's
// own Node is read as always.
func TestOtherNodeUnreadable(t *testing.T) {
	var logs bytes.Buffer
	s := &Source{cfg: Config{Node: "self", View: clusterstate.NewView("/podnet/v2/"), Logger: slog.New(slog.NewTextHandler(&logs, nil))},
		ownChanged: make(chan struct{}, 1), ownRegistration: make(chan struct{}, 1)}
	good := kubeNode("b", map[string]string{AnnotationUnderlayAddress: "198.18.0.11"}, []string{"198.18.0.12"}, "10.244.1.0/24")
	newer := kubeNode("b", map[string]string{AnnotationUnderlayAddress: "198.18.0.99", AnnotationFormat: "2"}, []string{"198.18.0.12"}, "10.244.9.0/24")
	c := kubeNode("c", map[string]string{AnnotationFormat: "2"}, []string{"198.18.0.13"}, "10.244.2.0/24")
	s.onNode(good)
	s.onNode(newer)
	s.onNode(newer)
	s.onNode(c)
	snap := s.cfg.View.Snapshot()
	if rec, ok := snap.Nodes["b"]; !ok || rec.Address.String() != "198.18.0.11" {
		t.Errorf("b after an unreadable event: %+v %v, want its last readable record", rec, ok)
	}
	if got := s.cfg.View.PodCIDRs("b"); len(got) != 1 || got[0].String() != "10.244.1.0/24" {
		t.Errorf("b's podCIDRs %v", got)
	}
	if _, ok := snap.Nodes["c"]; ok {
		t.Error("c, never readable, in the view")
	}
	if n := strings.Count(logs.String(), "other_node=b"); n != 1 {
		t.Errorf("b logged %d times:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "other_node=c") {
		t.Errorf("c not logged:\n%s", logs.String())
	}
	self := kubeNode("self", map[string]string{AnnotationFormat: "2", AnnotationUnderlayAddress: "198.18.0.20"}, nil)
	s.onNode(self)
	if rec, ok := s.cfg.View.Snapshot().Nodes["self"]; !ok || rec.Address.String() != "198.18.0.20" {
		t.Errorf("own Node: %+v %v", rec, ok)
	}
}
