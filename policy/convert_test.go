package policy

import (
	"net/netip"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodFromAPI(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	base := func() *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "a", Labels: map[string]string{"app": "web"},
				Annotations: map[string]string{"big": "dropped"}},
			Spec: corev1.PodSpec{NodeName: "n1",
				InitContainers: []corev1.Container{
					{Name: "init", Ports: []corev1.ContainerPort{{Name: "init-only", ContainerPort: 1}}},
					{Name: "sidecar", RestartPolicy: &always, Ports: []corev1.ContainerPort{{Name: "proxy", ContainerPort: 15001}}},
				},
				Containers: []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{
					{Name: "http", ContainerPort: 8080},
					{ContainerPort: 9000}, // unnamed: policy cannot name it
					{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
					{Name: "bad", ContainerPort: 70000},
				}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1",
				PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}, {IP: "fd00::1"}, {IP: "::ffff:10.0.0.1"}}},
		}
	}
	tests := []struct {
		name   string
		modify func(*corev1.Pod)
		want   Pod
	}{
		{
			name:   "running pod keeps identity, labels, addresses (unmapped, once) and named ports of containers and sidecars",
			modify: func(*corev1.Pod) {},
			want: Pod{Namespace: "x", Name: "a", Labels: map[string]string{"app": "web"}, Node: "n1",
				IPs:   []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1")},
				Ports: []NamedPort{{"proxy", TCP, 15001}, {"http", TCP, 8080}, {"dns", UDP, 53}}},
		},
		{
			name:   "podIP alone, from before podIPs",
			modify: func(p *corev1.Pod) { p.Status.PodIPs = nil },
			want: Pod{Namespace: "x", Name: "a", Labels: map[string]string{"app": "web"}, Node: "n1",
				IPs:   []netip.Addr{netip.MustParseAddr("10.0.0.1")},
				Ports: []NamedPort{{"proxy", TCP, 15001}, {"http", TCP, 8080}, {"dns", UDP, 53}}},
		},
		{
			name: "a finished pod has no addresses: they may be another pod's by now",
			modify: func(p *corev1.Pod) {
				p.Status.Phase = corev1.PodSucceeded
				p.Spec.Containers = nil
				p.Spec.InitContainers = nil
			},
			want: Pod{Namespace: "x", Name: "a", Labels: map[string]string{"app": "web"}, Node: "n1"},
		},
		{
			name: "a hostNetwork pod has no addresses of its own",
			modify: func(p *corev1.Pod) {
				p.Spec.HostNetwork = true
				p.Spec.Containers = nil
				p.Spec.InitContainers = nil
				p.Labels = nil
			},
			want: Pod{Namespace: "x", Name: "a", Node: "n1", HostNetwork: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := base()
			tt.modify(p)
			if got := PodFromAPI(p); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestNamespaceAndNodeFromAPI(t *testing.T) {
	ns := NamespaceFromAPI(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "x",
		Labels: map[string]string{"kubernetes.io/metadata.name": "x", "team": "blue"}}})
	if want := (Namespace{Name: "x", Labels: map[string]string{"kubernetes.io/metadata.name": "x", "team": "blue"}}); !reflect.DeepEqual(ns, want) {
		t.Errorf("namespace %+v, want %+v", ns, want)
	}
	n := NodeFromAPI(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeHostName, Address: "n1"},
		{Type: corev1.NodeInternalIP, Address: "198.18.0.1"},
		{Type: corev1.NodeInternalIP, Address: "fd00:18::1"},
		{Type: corev1.NodeExternalIP, Address: "198.18.0.1"},
	}}})
	want := Node{Name: "n1", IPs: []netip.Addr{netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("fd00:18::1")}}
	if !reflect.DeepEqual(n, want) {
		t.Errorf("node %+v, want %+v", n, want)
	}
}

func TestEndpointFor(t *testing.T) {
	s := fixture()
	if got := s.EndpointFor(netip.MustParseAddr("10.1.0.2")); got.Pod != (PodKey{"x", "b"}) {
		t.Errorf("10.1.0.2 is %v, want x/b", got)
	}
	if got := s.EndpointFor(netip.MustParseAddr("::ffff:10.1.0.2")); got.Pod != (PodKey{"x", "b"}) {
		t.Errorf("mapped 10.1.0.2 is %v, want x/b", got)
	}
	if got := s.EndpointFor(netip.MustParseAddr("192.168.0.1")); got.Pod != (PodKey{}) {
		t.Errorf("a node address is %v, want no pod", got)
	}
}
