package netpol

import (
	"maps"
	"slices"
	"strconv"
	"sync"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podnet/podnet/policy"
)

// shareTable makes pods with equal labels hold one label map, and pods
// with equal named ports one list. The pods of a Deployment, a
// StatefulSet or a Job carry the same labels and ports (their template's),
// so in a cluster of 50,000 pods there are a few thousand distinct sets:
// sharing them is most of what a remote pod costs the agent (a map of six
// labels is ~300 bytes; BenchmarkPodCacheMemory).
//
// Nothing may modify a pod's Labels or Ports once it is cached; policy
// only reads them.
//
// The table forgets nothing by itself: a rollout's new pod-template-hash
// is a new label set, and the old one stays in the table after its last
// pod is gone. sweep starts the table afresh from the pods the caches
// hold whenever it has grown to twice what was live at the last sweep, so
// its size stays within a constant factor of the live sets. A set a
// transform entered between the caches' listing and the sweep is merely
// entered again later by its next pod: the table is a cache for sharing,
// never a source of truth.
type shareTable struct {
	mu     sync.Mutex
	labels map[string]map[string]string
	ports  map[string][]policy.NamedPort
	// limit is the size at which the next sweep rebuilds the tables.
	limit int
	// buf and keys are scratch space for the keys, kept to spare the
	// transform an allocation per pod.
	buf  []byte
	keys []string
}

// minShareLimit keeps a small cluster from sweeping on every change.
const minShareLimit = 1024

func newShareTable() *shareTable {
	return &shareTable{
		labels: map[string]map[string]string{},
		ports:  map[string][]policy.NamedPort{},
		limit:  minShareLimit,
	}
}

// share replaces p's labels and named ports by the table's equal ones,
// entering them when they are new.
func (t *shareTable) share(p *policy.Pod) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.shareLocked(p)
}

func (t *shareTable) shareLocked(p *policy.Pod) {
	if len(p.Labels) > 0 {
		t.buf, t.keys = labelsKey(t.buf[:0], t.keys[:0], p.Labels)
		if m, ok := t.labels[string(t.buf)]; ok {
			p.Labels = m
		} else {
			t.labels[string(t.buf)] = p.Labels
		}
	}
	if len(p.Ports) > 0 {
		t.buf = portsKey(t.buf[:0], p.Ports)
		if ps, ok := t.ports[string(t.buf)]; ok {
			p.Ports = ps
		} else {
			// Clipped, so that an append to one pod's list can never
			// write into another's.
			p.Ports = slices.Clip(p.Ports)
			t.ports[string(t.buf)] = p.Ports
		}
	}
}

// sharePolicy makes the label selectors of a NetworkPolicy's spec,
// which the cache owns, hold the table's maps: the policies of a cluster
// repeat a few selectors ("app: web", "team: payments") thousands of
// times, and a map of one label is ~300 bytes.
func (t *shareTable) sharePolicy(spec *networkingv1.NetworkPolicySpec) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sharePolicyLocked(spec, false)
}

// sharePolicyLocked shares spec's selectors' maps; with enterOnly it
// only enters them (a cached spec, which readers may be reading, is not
// written to).
func (t *shareTable) sharePolicyLocked(spec *networkingv1.NetworkPolicySpec, enterOnly bool) {
	t.shareSelector(&spec.PodSelector, enterOnly)
	peers := func(ps []networkingv1.NetworkPolicyPeer) {
		for i := range ps {
			t.shareSelector(ps[i].PodSelector, enterOnly)
			t.shareSelector(ps[i].NamespaceSelector, enterOnly)
		}
	}
	for i := range spec.Ingress {
		peers(spec.Ingress[i].From)
	}
	for i := range spec.Egress {
		peers(spec.Egress[i].To)
	}
}

func (t *shareTable) shareSelector(sel *metav1.LabelSelector, enterOnly bool) {
	if sel == nil || len(sel.MatchLabels) == 0 {
		return
	}
	t.buf, t.keys = labelsKey(t.buf[:0], t.keys[:0], sel.MatchLabels)
	if m, ok := t.labels[string(t.buf)]; !ok {
		t.labels[string(t.buf)] = sel.MatchLabels
	} else if !enterOnly {
		sel.MatchLabels = m
	}
}

// sweep rebuilds the tables from the caches' pods and policies once they
// hold twice the sets that were live at the last sweep.
func (t *shareTable) sweep(pods []policy.Pod, policies []*networkingv1.NetworkPolicy) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.labels)+len(t.ports) < t.limit {
		return
	}
	t.labels = make(map[string]map[string]string, len(t.labels)/2)
	t.ports = make(map[string][]policy.NamedPort, len(t.ports)/2)
	for i := range pods {
		p := pods[i] // a copy: the table keeps the maps, not the pod
		t.shareLocked(&p)
	}
	for _, np := range policies {
		t.sharePolicyLocked(&np.Spec, true)
	}
	t.limit = max(minShareLimit, 2*(len(t.labels)+len(t.ports)))
}

// size is the number of distinct sets the table holds.
func (t *shareTable) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.labels) + len(t.ports)
}

// labelsKey appends a canonical form of labels to b: the pairs sorted by
// key, each key and value followed by a NUL, which neither may contain.
// keys is scratch space; both are returned for reuse.
func labelsKey(b []byte, keys []string, labels map[string]string) ([]byte, []string) {
	keys = slices.AppendSeq(keys, maps.Keys(labels))
	slices.Sort(keys)
	for _, k := range keys {
		b = append(b, k...)
		b = append(b, 0)
		b = append(b, labels[k]...)
		b = append(b, 0)
	}
	clear(keys) // the scratch space must not keep a dropped pod's strings
	return b, keys
}

// portsKey appends a form of ports to b that equal lists share, in their
// order (the order of the pod's containers, the same for every pod of a
// template).
func portsKey(b []byte, ports []policy.NamedPort) []byte {
	for _, p := range ports {
		b = append(b, p.Name...)
		b = append(b, 0)
		b = strconv.AppendUint(b, uint64(p.Protocol), 10)
		b = append(b, '/')
		b = strconv.AppendUint(b, uint64(p.Port), 10)
		b = append(b, 0)
	}
	return b
}
