package connectivity

import (
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const (
	// LabelRun marks every namespace a run creates, so that
	// `podnet connectivity cleanup` finds a killed run's leftovers.
	LabelRun = "podnet.io/connectivity-test"
	// NamespacePrefix starts every run's namespace name.
	NamespacePrefix = "podnet-connectivity-"
	// ServiceName is the Service in front of the cross-node server.
	ServiceName = "echo"

	httpPort = 8080
	udpPort  = 8081
	// binary is podnet in podnet's image.
	binary = "/opt/podnet/bin/podnet"
)

// Server names.
const (
	ServerSame  = "server-same"
	ServerCross = "server-cross"
)

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelRun: "true"}}}
}

func basePod(name, node, image string, labels map[string]string, restart corev1.RestartPolicy, args []string) *corev1.Pod {
	no := false
	grace := int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			AutomountServiceAccountToken:  &no,
			TerminationGracePeriodSeconds: &grace,
			RestartPolicy:                 restart,
			Containers: []corev1.Container{{
				Name:            "podnet",
				Image:           image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         append([]string{binary}, args...),
			}},
		},
	}
}

// serverPod serves HTTP and UDP, each answering with the peer address;
// the cross-node one publishes hostPort.
func serverPod(name, node, image string, hostPort int32) *corev1.Pod {
	p := basePod(name, node, image, map[string]string{"app": name}, corev1.RestartPolicyAlways,
		[]string{"diag", "serve", "--listen", ":" + strconv.Itoa(httpPort), "--udp", ":" + strconv.Itoa(udpPort)})
	c := &p.Spec.Containers[0]
	c.Ports = []corev1.ContainerPort{
		{Name: "http", ContainerPort: httpPort, Protocol: corev1.ProtocolTCP, HostPort: hostPort},
		{Name: "udp", ContainerPort: udpPort, Protocol: corev1.ProtocolUDP},
	}
	c.ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(httpPort)}},
		PeriodSeconds: 1,
	}
	return p
}

// proberPod runs one probe and ends; its log is the ProbeResult.
func proberPod(name, node, image, role string, args []string) *corev1.Pod {
	return basePod(name, node, image, map[string]string{"role": role}, corev1.RestartPolicyNever, append([]string{"diag", "probe"}, args...))
}

// probeArgs are `podnet diag probe`'s arguments for a check.
func probeArgs(kind Kind, target string, blocked bool, retryFor time.Duration) []string {
	expect := "reach"
	if blocked {
		expect = "blocked"
	}
	return []string{"--kind", string(kind), "--expect", expect, "--retry-for", retryFor.String(), "--timeout", "2s", target}
}

func service() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: ServiceName},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: map[string]string{"app": ServerCross},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(httpPort), Protocol: corev1.ProtocolTCP}},
		},
	}
}

// policies returns what a phase needs in place; every other policy of
// the run is removed before the phase's checks.
func policies(p Phase) []*networkingv1.NetworkPolicy {
	denyIn := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-ingress"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": ServerCross}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		},
	}
	port := intstr.FromInt32(httpPort)
	allow := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "allow-client"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": ServerCross}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": RoleClient}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: &port}},
			}},
		},
	}
	denyOut := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-egress"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"role": RoleEgressClient}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
		},
	}
	switch p {
	case PhaseDenyIngress:
		return []*networkingv1.NetworkPolicy{denyIn}
	case PhaseAllowIngress:
		return []*networkingv1.NetworkPolicy{denyIn, allow}
	case PhaseDenyEgress:
		return []*networkingv1.NetworkPolicy{denyOut}
	}
	return nil
}
