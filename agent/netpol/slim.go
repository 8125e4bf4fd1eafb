package netpol

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/podnet/podnet/policy"
)

// The informers' caches hold these slim objects, made by the transforms
// below from the decoded API objects, which are dropped at once: a pod
// costs the agent its policy.Pod (labels, addresses, named ports) and a
// resource version, not its spec and status (BenchmarkPodCacheMemory).
//
// The informer needs of a cached object only its key (namespace/name,
// through metav1.ObjectMetaAccessor) and its resource version (an update
// with the same version is taken for a resync and not delivered), so the
// slim types carry those and build the ObjectMeta only when asked.

// podObj is a Pod in the cache.
type podObj struct {
	rv  string
	uid types.UID // for the Events on the pod
	policy.Pod
}

func (p *podObj) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, ResourceVersion: p.rv}
}

// namespaceObj is a Namespace in the cache.
type namespaceObj struct {
	rv string
	policy.Namespace
}

func (n *namespaceObj) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: n.Name, ResourceVersion: n.rv}
}

// nodeObj is a Node in the cache: its name, labels and InternalIP and
// ExternalIP addresses (policy.NodeFromAPI), no status conditions,
// images or capacity.
type nodeObj struct {
	rv string
	policy.Node
}

func (n *nodeObj) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: n.Name, ResourceVersion: n.rv}
}

// clusterPolicyObj is a ClusterNetworkPolicy in the cache, read once
// into what policy needs (policy.ClusterPolicyFromAPI): the decoded
// object, its status and last-applied annotation go.
type clusterPolicyObj struct {
	rv string
	policy.ClusterPolicy
	// generation and conditions are the object's, for its status
	// (statusWriter).
	generation int64
	conditions []metav1.Condition
}

// condition is the object's condition of type t, nil when it has none.
func (p *clusterPolicyObj) condition(t string) *metav1.Condition {
	for i := range p.conditions {
		if p.conditions[i].Type == t {
			return &p.conditions[i]
		}
	}
	return nil
}

func (p *clusterPolicyObj) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: p.Name, ResourceVersion: p.rv}
}

// Each transform passes anything that is not its type through: a
// tombstone's object was transformed when it was cached.

func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &podObj{rv: p.ResourceVersion, uid: p.UID, Pod: policy.PodFromAPI(p)}, nil
}

// slimSharedPod is slimPod, the pod then sharing its labels and named
// ports with the cached pods that have equal ones (shareTable).
func (s *Service) slimSharedPod(obj any) (any, error) {
	o, err := slimPod(obj)
	if p, ok := o.(*podObj); ok && err == nil {
		s.share.share(&p.Pod)
	}
	return o, err
}

// slimSharedPolicy is slimPolicy, the policy's label selectors then
// sharing their maps with the cache's equal ones (shareTable).
func (s *Service) slimSharedPolicy(obj any) (any, error) {
	o, err := slimPolicy(obj)
	if np, ok := o.(*networkingv1.NetworkPolicy); ok && err == nil {
		s.share.sharePolicy(&np.Spec)
	}
	return o, err
}

func slimNamespace(obj any) (any, error) {
	n, ok := obj.(*corev1.Namespace)
	if !ok {
		return obj, nil
	}
	return &namespaceObj{rv: n.ResourceVersion, Namespace: policy.NamespaceFromAPI(n)}, nil
}

func slimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	return &nodeObj{rv: n.ResourceVersion, Node: policy.NodeFromAPI(n)}, nil
}

// slimPolicy keeps a NetworkPolicy's key, version and spec: what Compile
// reads. Its annotations (kubectl's last-applied copy of the whole
// object), managed fields and status go.
func slimPolicy(obj any) (any, error) {
	np, ok := obj.(*networkingv1.NetworkPolicy)
	if !ok {
		return obj, nil
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: np.Namespace, Name: np.Name, UID: np.UID, ResourceVersion: np.ResourceVersion},
		Spec:       np.Spec,
	}, nil
}

func slimClusterPolicy(obj any) (any, error) {
	p, ok := obj.(*cnpv1beta1.ClusterNetworkPolicy)
	if !ok {
		return obj, nil
	}
	return &clusterPolicyObj{rv: p.ResourceVersion, ClusterPolicy: policy.ClusterPolicyFromAPI(p),
		generation: p.Generation, conditions: p.Status.Conditions}, nil
}

// The update filters: an update that changes nothing policy reads (most
// pod updates are status changes of its containers) costs no rebuild.

func samePod(a, b any) bool {
	x, ok1 := a.(*podObj)
	y, ok2 := b.(*podObj)
	return ok1 && ok2 && x.Node == y.Node && x.HostNetwork == y.HostNetwork && maps.Equal(x.Labels, y.Labels) &&
		slices.Equal(x.IPs, y.IPs) && slices.Equal(x.Ports, y.Ports)
}

func sameNamespace(a, b any) bool {
	x, ok1 := a.(*namespaceObj)
	y, ok2 := b.(*namespaceObj)
	return ok1 && ok2 && maps.Equal(x.Labels, y.Labels)
}

func sameNode(a, b any) bool {
	x, ok1 := a.(*nodeObj)
	y, ok2 := b.(*nodeObj)
	return ok1 && ok2 && slices.Equal(x.IPs, y.IPs) && maps.Equal(x.Labels, y.Labels)
}
