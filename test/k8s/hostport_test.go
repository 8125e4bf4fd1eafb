package k8s_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podnet/podnet/portmap"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// diagHostPort is the node port published for diag-hp's diagPort.
const diagHostPort = 18080

// hostPort runs a server pod with a hostPort and reaches it on the node's
// address and on 127.0.0.1 from the node, and on the node's address from
// another pod. kubelet passes the mapping to the runtime, the runtime to
// podnet as the portMappings capability.
func hostPort(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	// On the first node, whose address and nftables the checks use.
	n := c.Nodes[0]
	p := onNode(n, diagPod("diag-hp", "serve", "--listen", fmt.Sprintf(":%d", diagPort)))
	p.Spec.Containers[0].Ports = []corev1.ContainerPort{{
		Name: "http", ContainerPort: diagPort, HostPort: diagHostPort, Protocol: corev1.ProtocolTCP,
	}}
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(ctx, t, c, "diag-hp", corev1.PodRunning)
	elems, err := n.PodNFTElements()
	if err != nil {
		t.Fatal(err)
	}
	var published []string
	for _, e := range elems {
		if e.Table == portmap.TableName {
			published = append(published, e.String())
		}
	}
	if len(published) == 0 {
		t.Fatalf("no element in table %s for diag-hp's hostPort", portmap.TableName)
	}
	t.Logf("host port elements: %s", strings.Join(published, "; "))
	hc := n.HTTPClient(10 * time.Second)
	for _, host := range []string{n.IP, "127.0.0.1"} {
		// Running is not listening: a loaded node may start the server
		// a moment after kubelet reports the container started.
		url := fmt.Sprintf("http://%s:%d/", host, diagHostPort)
		body, err := retryGet(hc, url, 30*time.Second)
		if err != nil {
			t.Fatalf("node to hostPort %s: %v", url, err)
		}
		if !strings.Contains(body, "hello from diag-hp ") {
			t.Fatalf("node to hostPort %s: %q, want diag-hp's answer", url, body)
		}
		t.Logf("node to %s: %s", url, body)
	}
	url := fmt.Sprintf("http://%s:%d/", n.IP, diagHostPort)
	body := podFetch(ctx, t, c, diagPod("diag-hp-client", "get", "--timeout", "10s", url))
	if !strings.Contains(body, "hello from diag-hp ") {
		t.Fatalf("pod to hostPort %s: %q, want diag-hp's answer", url, body)
	}
	t.Logf("pod to %s: %s", url, body)
}
