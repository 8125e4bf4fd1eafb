// Package policytest holds what the policy benchmarks of several packages
// share: API objects shaped as a real cluster's.
package policytest

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DecodedPod is the i-th pod of a large deployment as the API server's
// decoding hands it over: every string its own allocation (so a
// benchmark of what a cache keeps counts what interning saves), six
// labels, two addresses, three named ports, on one of 100 nodes.
func DecodedPod(i int) *corev1.Pod {
	c := strings.Clone
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: c("production-payments"), Name: fmt.Sprintf("checkout-api-7d9c8b6f5d-%05d", i),
			ResourceVersion: fmt.Sprint(1000000 + i), UID: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
			Labels: map[string]string{c("app.kubernetes.io/name"): c("checkout-api"), c("app.kubernetes.io/part-of"): c("payments"),
				c("app.kubernetes.io/version"): c("v1.42.0"), c("pod-template-hash"): fmt.Sprintf("7d9c8b6f%02d", i%10),
				c("tier"): c("backend"), c("team"): c("payments")}},
		Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%03d", i%100), Containers: []corev1.Container{{Name: c("app"), Image: c("registry.example/checkout:v1.42.0"),
			Ports: []corev1.ContainerPort{{Name: c("http"), ContainerPort: 8080}, {Name: c("grpc"), ContainerPort: 9090}, {Name: c("metrics"), ContainerPort: 9102}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{
			{IP: fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255)}, {IP: fmt.Sprintf("fd00::%x", i)}}},
	}
}
