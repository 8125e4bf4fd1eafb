package k8s_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// TestServices runs podnet, deployed from deploy/kubernetes, under a real
// kube-proxy in each of its modes, on two nodes: a pod reaches a Service
// whose one endpoint is on the other node, a node reaches it from its
// host network, the outside network reaches it through a NodePort of
// either node, a pod reaches itself through its own Service (hairpin,
// which the CNI plugin must allow), and podnet's own rules (host ports,
// masquerade of egress) work beside kube-proxy's.
func TestServices(t *testing.T) {
	for _, mode := range []cluster.ProxyMode{cluster.ProxyIPTables, cluster.ProxyNFTables} {
		t.Run(string(mode), func(t *testing.T) { services(t, mode) })
	}
}

func services(t *testing.T, mode cluster.ProxyMode) {
	c := cluster.Start(t, cluster.WithNodes(2), cluster.WithProxyMode(mode))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if err := c.Deploy(ctx, cluster.Default, nil); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		waitNodeReady(ctx, t, c, n.Name, 3*time.Minute)
	}
	n1, n2 := c.Nodes[0], c.Nodes[1]
	step := steps(t)

	// The backend runs on the second node; clients start on the first,
	// so that every Service path below crosses the underlay.
	var svc *corev1.Service
	step("ServiceOnOtherNode", func(t *testing.T) {
		backend := onNode(n2, diagPod("svc-backend", "serve", "--listen", fmt.Sprintf(":%d", diagPort)))
		backend.Labels["svc"] = "svc-backend"
		if _, err := c.Client.CoreV1().Pods("default").Create(ctx, backend, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitPod(ctx, t, c, "svc-backend", corev1.PodRunning)
		var err error
		svc, err = c.Client.CoreV1().Services("default").Create(ctx, diagService("svc-backend", corev1.ServiceTypeNodePort, false), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		url := fmt.Sprintf("http://%s/", net.JoinHostPort(svc.Spec.ClusterIP, "80"))
		body := podFetch(ctx, t, c, onNode(n1, diagPod("svc-client", "get", "--timeout", "3s", "--retry-for", "60s", url)))
		if !strings.Contains(body, "hello from svc-backend ") {
			t.Fatalf("pod to ClusterIP %s: %q, want svc-backend's answer", url, body)
		}
		t.Logf("pod on %s to ClusterIP %s: %s", n1.Name, url, lastLine(body))
	})

	step("NodeToClusterIP", func(t *testing.T) {
		// The first node's host network: kube-proxy's output path.
		url := fmt.Sprintf("http://%s/", net.JoinHostPort(svc.Spec.ClusterIP, "80"))
		if body, err := retryGet(c.Nodes[0].HTTPClient(3*time.Second), url, time.Minute); err != nil || !strings.Contains(body, "hello from svc-backend ") {
			t.Fatalf("node to ClusterIP %s: %q, %v", url, body, err)
		}
	})

	step("NodePortFromOutside", func(t *testing.T) {
		// From the switch's namespace, the outside network, to each
		// node's address: the first node forwards to the second.
		port := fmt.Sprint(svc.Spec.Ports[0].NodePort)
		hc := outsideHTTPClient(c, 3*time.Second)
		for _, n := range c.Nodes {
			url := fmt.Sprintf("http://%s/", net.JoinHostPort(n.IP, port))
			body, err := retryGet(hc, url, time.Minute)
			if err != nil || !strings.Contains(body, "hello from svc-backend ") {
				t.Fatalf("outside to NodePort %s: %q, %v", url, body, err)
			}
			t.Logf("outside to NodePort %s: %s", url, body)
		}
	})

	step("Hairpin", func(t *testing.T) {
		// One pod serves and, from a second container in its own network
		// namespace, fetches through the Service whose only endpoint it
		// is: the packet leaves the pod, is DNATed back to the same pod
		// on its node, and must come in again through the same link.
		for _, n := range c.Nodes {
			name := "svc-hairpin-" + n.Name
			p := onNode(n, diagPod(name, "serve", "--listen", fmt.Sprintf(":%d", diagPort)))
			p.Labels["svc"] = name
			p.Spec.RestartPolicy = corev1.RestartPolicyNever
			hs, err := c.Client.CoreV1().Services("default").Create(ctx, diagService(name, corev1.ServiceTypeClusterIP, true), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			url := fmt.Sprintf("http://%s/", net.JoinHostPort(hs.Spec.ClusterIP, "80"))
			get := p.Spec.Containers[0]
			get.Name = "get"
			get.Command = []string{"/opt/podnet/bin/podnet", "diag", "get", "--timeout", "3s", "--retry-for", "60s", url}
			p.Spec.Containers = append(p.Spec.Containers, get)
			if _, err := c.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			body := containerResult(ctx, t, c, name, "get")
			if !strings.Contains(body, "hello from "+name+" ") {
				t.Fatalf("%s to its own Service %s: %q, want its own answer", name, url, body)
			}
			t.Logf("hairpin on %s through %s: %s", n.Name, url, lastLine(body))
		}
	})

	// podnet's nftables beside kube-proxy's rules (iptables-nft or
	// nftables): host ports and masqueraded egress still work.
	step("HostPort", func(t *testing.T) { hostPort(ctx, t, c) })
	step("EgressMasqueraded", func(t *testing.T) { egressMasqueraded(ctx, t, c) })
}

// diagService selects the diag pods labelled svc=name, port 80 to
// diagPort. notReady publishes endpoints before the pod is Ready, for a
// pod that fetches through its own Service while it starts.
func diagService(name string, typ corev1.ServiceType, notReady bool) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Type:                     typ,
			Selector:                 map[string]string{"svc": name},
			PublishNotReadyAddresses: notReady,
			Ports: []corev1.ServicePort{{
				Name: "http", Port: 80, TargetPort: intstr.FromInt32(diagPort), Protocol: corev1.ProtocolTCP,
			}},
		},
	}
}

// podFetch runs a one-shot pod (a `podnet diag get`, a query) to
// completion and returns what it printed; a failure fails the test with
// the pod's log.
func podFetch(ctx context.Context, t *testing.T, c *cluster.Cluster, p *corev1.Pod) string {
	t.Helper()
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return containerResult(ctx, t, c, p.Name, p.Spec.Containers[0].Name)
}

// containerResult waits for the pod's container to exit and returns its
// log; an exit code other than 0 fails the test with it.
func containerResult(ctx context.Context, t *testing.T, c *cluster.Cluster, pod, container string) string {
	t.Helper()
	logs := func() string {
		body, _ := c.Client.CoreV1().Pods("default").GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
		return strings.TrimSpace(string(body))
	}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		p, err := c.Client.CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, cs := range p.Status.ContainerStatuses {
			if x := cs.State.Terminated; cs.Name == container && x != nil {
				if x.ExitCode != 0 {
					t.Fatalf("%s/%s on %s exited %d: %s\n%s", pod, container, p.Spec.NodeName, x.ExitCode, logs(), proxyRules(c, p.Spec.NodeName))
				}
				return logs()
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("%s/%s did not exit in 2m: %s", pod, container, logs())
	return ""
}

// outsideHTTPClient dials from the switch's namespace: the outside
// network, which reaches the nodes only at their underlay addresses.
func outsideHTTPClient(c *cluster.Cluster, timeout time.Duration) *http.Client {
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var conn net.Conn
		err := netns.Do(netns.NamedPath(c.OutsideNetNS), func() error {
			var err error
			conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return conn, err
	}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
}

// retryGet GETs url until it answers 200 or for as long as within; a
// Service's rules appear some time after the Service.
func retryGet(hc *http.Client, url string, within time.Duration) (string, error) {
	deadline := time.Now().Add(within)
	for {
		body, err := func() (string, error) {
			resp, err := hc.Get(url)
			if err != nil {
				return "", err
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				return string(b), fmt.Errorf("%s", resp.Status)
			}
			return strings.TrimSpace(string(b)), nil
		}()
		if err == nil || time.Now().After(deadline) {
			return body, err
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// proxyRules is what kube-proxy programmed on the node, for a failure's
// message.
func proxyRules(c *cluster.Cluster, node string) string {
	for _, n := range c.Nodes {
		if n.Name != node {
			continue
		}
		args := []string{"--net=" + n.NetNS, "iptables-save", "-t", "nat"}
		if c.ProxyMode() == cluster.ProxyNFTables {
			args = []string{"--net=" + n.NetNS, "nft", "list", "table", "ip", "kube-proxy"}
		}
		out, err := exec.Command("nsenter", args...).CombinedOutput()
		if err != nil {
			return fmt.Sprintf("%s on %s: %v: %s", args[1], node, err, out)
		}
		return fmt.Sprintf("%s on %s:\n%s", args[1], node, out)
	}
	return ""
}

// lastLine is a diag get's answer: the lines before it are its retries.
func lastLine(s string) string { return s[strings.LastIndex(s, "\n")+1:] }

// steps returns a runner of t's steps, which depend on each other: the
// first that fails ends t.
func steps(t *testing.T) func(name string, fn func(t *testing.T)) {
	return func(name string, fn func(t *testing.T)) {
		if !t.Run(name, fn) {
			t.FailNow()
		}
	}
}
