package k8s_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podnet/podnet/test/k8s/cluster"
)

// writeVerbs are apiserver_request_total's verbs that change objects.
var writeVerbs = []string{"POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY"}

// apiWritesPerPod creates perNode pods on every node, waits until they
// run, deletes them and waits until they are gone, and counts the API
// server's writes meanwhile from its own apiserver_request_total: what
// Kubernetes writes for a pod (the pod, its binding, its status, events)
// and what podnet does. In the node-CIDR model podnet writes nothing
// per pod: no write to nodes but the kubelets' status, and no PATCH in
// the agents' own request counters. It returns the pods (deleted).
func apiWritesPerPod(ctx context.Context, t *testing.T, c *cluster.Cluster, perNode int) []*corev1.Pod {
	t.Helper()
	before, agentsBefore := apiserverRequests(ctx, t, c), agentRequests(t, c)
	start := time.Now()
	var pods []*corev1.Pod
	for _, n := range c.Nodes {
		for i := range perNode {
			name := fmt.Sprintf("diag-burst-%s-%d", n.Name, i)
			if _, err := c.Client.CoreV1().Pods("default").Create(ctx, onNode(n, diagPod(name, "serve", "--listen", fmt.Sprintf(":%d", diagPort))), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, n := range c.Nodes {
		for i := range perNode {
			pods = append(pods, waitPod(ctx, t, c, fmt.Sprintf("diag-burst-%s-%d", n.Name, i), corev1.PodRunning))
		}
	}
	for _, p := range pods {
		if err := c.Client.CoreV1().Pods("default").Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range pods {
		waitPodGone(ctx, t, c, p.Name)
	}
	elapsed := time.Since(start)
	after, agentsAfter := apiserverRequests(ctx, t, c), agentRequests(t, c)

	var lines []string
	total := 0.0
	for _, k := range slices.Sorted(maps.Keys(after)) {
		d := after[k] - before[k]
		if d == 0 || !slices.Contains(writeVerbs, strings.Fields(k)[0]) {
			continue
		}
		total += d
		lines = append(lines, fmt.Sprintf("  %-40s %4.0f  %5.2f per pod", k, d, d/float64(len(pods))))
		if group, _, _ := strings.Cut(strings.Fields(k)[1], "/"); strings.Contains(group, "podnet") {
			t.Errorf("a write to podnet's API group: %s", k)
		}
	}
	t.Logf("API writes while %d pods were created, ran and were deleted (%s; apiserver_request_total, by verb and group/resource/subresource; time-driven writes such as leases and node status included):\n%s\n  total %.0f, %.2f per pod",
		len(pods), elapsed.Round(time.Second), strings.Join(lines, "\n"), total, total/float64(len(pods)))
	for _, v := range writeVerbs {
		if d := after[v+" core/nodes/"] - before[v+" core/nodes/"]; d != 0 {
			t.Errorf("%.0f %s of nodes (not their status) while pods came and went: podnet writes per pod", d, v)
		}
	}
	for node, a := range agentsAfter {
		var deltas []string
		for _, k := range slices.Sorted(maps.Keys(a)) {
			if d := a[k] - agentsBefore[node][k]; d != 0 {
				deltas = append(deltas, fmt.Sprintf("%s %.0f", k, d))
				if strings.HasPrefix(k, "PATCH") {
					t.Errorf("agent on %s patched meanwhile: %s", node, k)
				}
			}
		}
		t.Logf("agent on %s: API requests meanwhile (podnet_agent_api_requests_total): %v", node, deltas)
	}
	return pods
}

var (
	sampleLine = regexp.MustCompile(`^(\w+)\{(.*)\} (\S+)$`)
	labelPair  = regexp.MustCompile(`(\w+)="([^"]*)"`)
)

// parseCounters sums the samples of metric in a Prometheus text
// exposition by the labels key gives.
func parseCounters(r io.Reader, metric string, key func(labels map[string]string) string) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		m := sampleLine.FindStringSubmatch(sc.Text())
		if m == nil || m[1] != metric {
			continue
		}
		labels := map[string]string{}
		for _, l := range labelPair.FindAllStringSubmatch(m[2], -1) {
			labels[l[1]] = l[2]
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sc.Text(), err)
		}
		out[key(labels)] += v
	}
	return out, sc.Err()
}

// apiserverRequests is apiserver_request_total by "VERB
// group/resource/subresource" (group "core" for the core API).
func apiserverRequests(ctx context.Context, t testing.TB, c *cluster.Cluster) map[string]float64 {
	t.Helper()
	body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("apiserver /metrics: %v", err)
	}
	out, err := parseCounters(bytes.NewReader(body), "apiserver_request_total", func(l map[string]string) string {
		group := l["group"]
		if group == "" {
			group = "core"
		}
		return l["verb"] + " " + group + "/" + l["resource"] + "/" + l["subresource"]
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// agentRequests is each node's podnet_agent_api_requests_total by "VERB
// code", read from the agent's /metrics on the node's port 9603.
func agentRequests(t *testing.T, c *cluster.Cluster) map[string]map[string]float64 {
	t.Helper()
	out := map[string]map[string]float64{}
	for _, n := range c.Nodes {
		resp, err := n.HTTPClient(10 * time.Second).Get("http://" + n.IP + ":9603/metrics")
		if err != nil {
			t.Fatalf("agent metrics on %s: %v", n.Name, err)
		}
		m, err := parseCounters(resp.Body, "podnet_agent_api_requests_total", func(l map[string]string) string {
			return l["verb"] + " " + l["code"]
		})
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		out[n.Name] = m
	}
	return out
}

// waitPodGone waits until the pod is gone from the API: its kubelet has
// torn it down, CNI DEL included.
func waitPodGone(ctx context.Context, t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, err := c.Client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s still there 2m after deletion", name)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
