package k8s_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/podnet/podnet/agent/kubeevents"
	"github.com/podnet/podnet/agent/netpol"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// TestKubernetesEvents checks issue 34's Kubernetes conventions on one
// node of the blocks deployment, each seen as a user sees it (kubectl
// get events, the object's status):
//
//   - the node's policy table made unusable (a layout marker of a newer
//     podnet, which the agent refuses to replace): PolicyApplyFailed on
//     the Node; a pod a policy selects, created meanwhile, is closed by
//     its plugin (the agent cannot answer the handshake in time); once
//     the table is gone the apply recovers (PolicyApplied, once) and the
//     agent opens the pod (NetworkClosedAgentUnreachable on the Pod);
//   - an IPPool that sets nodeSelector, which the allocator refuses:
//     InvalidIPPool on the IPPool, once;
//   - ClusterNetworkPolicies with and without a domainNames peer: their
//     Accepted condition, False with DomainNamesUnsupported and True.
func TestKubernetesEvents(t *testing.T) {
	c := cluster.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	deployPodnet(ctx, t, c, cluster.Blocks, nil)
	n := c.Nodes[0]

	kubectlApply(ctx, t, c, `apiVersion: podnet.io/v1
kind: IPPool
metadata: {name: ev-selector}
spec: {name: ev-selector, cidr: 10.250.0.0/24, blockSize: 28, nodeSelector: "zone=a"}
---
apiVersion: policy.networking.k8s.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: ev-dns}
spec:
  tier: Admin
  priority: 10
  subject: {namespaces: {matchLabels: {ev: none}}}
  egress:
  - {name: to-names, action: Accept, to: [{domainNames: [example.com]}]}
---
apiVersion: policy.networking.k8s.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: ev-plain}
spec:
  tier: Admin
  priority: 11
  subject: {namespaces: {matchLabels: {ev: none}}}
  ingress:
  - {name: none, action: Deny, from: [{namespaces: {matchLabels: {ev: none}}}]}
`)
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "ev-closed", Namespace: "default"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"ev": "closed"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
	if _, err := c.Client.NetworkingV1().NetworkPolicies("default").Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Let the agent apply the policy before the table is broken.
	time.Sleep(2 * time.Second)

	// A table of a "newer podnet": the agent's applies fail until it goes.
	nodeNFT(ctx, t, n, "delete table inet podnet-policy")
	nodeNFT(ctx, t, n, "add table inet podnet-policy")
	nodeNFT(ctx, t, n, "add set inet podnet-policy layout-v99 { type ipv4_addr; }")
	defer exec.Command("nsenter", "--net="+n.NetNS, "nft", "delete", "table", "inet", "podnet-policy").Run()
	pod := diagPod("ev-closed", "serve", "--listen", fmt.Sprintf(":%d", diagPort))
	pod.Labels["ev"] = "closed"
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEvent(ctx, t, c, "Node", n.Name, kubeevents.ReasonPolicyApplyFailed, corev1.EventTypeWarning)
	waitPod(ctx, t, c, "ev-closed", corev1.PodRunning) // closed by its plugin
	nodeNFT(ctx, t, n, "delete table inet podnet-policy")
	waitEvent(ctx, t, c, "Node", n.Name, kubeevents.ReasonPolicyApplied, corev1.EventTypeNormal)
	e := waitEvent(ctx, t, c, "Pod", "ev-closed", kubeevents.ReasonClosedAgentUnreachable, corev1.EventTypeWarning)
	if e.InvolvedObject.Namespace != "default" || e.InvolvedObject.UID == "" || !strings.Contains(e.Message, "open now") {
		t.Errorf("closed pod's event: %+v", e)
	}
	e = waitEvent(ctx, t, c, "IPPool", "ev-selector", kubeevents.ReasonInvalidIPPool, corev1.EventTypeWarning)
	if !strings.Contains(e.Message, "nodeSelector") {
		t.Errorf("invalid pool's event says %q, want its nodeSelector named", e.Message)
	}
	checkCNPCondition(ctx, t, c, "ev-dns", metav1.ConditionFalse, netpol.ReasonDomainNamesUnsupported)
	checkCNPCondition(ctx, t, c, "ev-plain", metav1.ConditionTrue, netpol.ReasonAccepted)

	// No spam: one recovery, one event of the pool (its count too).
	time.Sleep(5 * time.Second)
	for _, w := range []struct{ kind, name, reason string }{
		{"Node", n.Name, kubeevents.ReasonPolicyApplied},
		{"IPPool", "ev-selector", kubeevents.ReasonInvalidIPPool},
		{"Pod", "ev-closed", kubeevents.ReasonClosedAgentUnreachable},
	} {
		if evs := podnetEvents(ctx, t, c, w.kind, w.name, w.reason); len(evs) != 1 || evs[0].Count > 1 {
			t.Errorf("%s %s %s: %d events (%+v), want one, once", w.kind, w.name, w.reason, len(evs), evs)
		}
	}
}

func kubectlApply(ctx context.Context, t *testing.T, c *cluster.Cluster, yaml string) {
	t.Helper()
	cmd := c.Kubectl(ctx, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(yaml)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
}

func nodeNFT(ctx context.Context, t *testing.T, n *cluster.Node, script string) {
	t.Helper()
	if out, err := exec.CommandContext(ctx, "nsenter", "--net="+n.NetNS, "nft", script).CombinedOutput(); err != nil {
		t.Fatalf("nft %s on %s: %v\n%s", script, n.Name, err, out)
	}
}

// podnetEvents are podnet-agent's Events of a reason on an object, as
// `kubectl get events -A -o json` lists them.
func podnetEvents(ctx context.Context, t *testing.T, c *cluster.Cluster, kind, name, reason string) []corev1.Event {
	t.Helper()
	out, err := c.Kubectl(ctx, "get", "events", "-A", "-o", "json").Output()
	if err != nil {
		t.Fatalf("kubectl get events: %v", err)
	}
	var list corev1.EventList
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatal(err)
	}
	var found []corev1.Event
	for _, e := range list.Items {
		if e.Source.Component == kubeevents.Component && e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name && e.Reason == reason {
			found = append(found, e)
		}
	}
	return found
}

func waitEvent(ctx context.Context, t *testing.T, c *cluster.Cluster, kind, name, reason, typ string) corev1.Event {
	t.Helper()
	var e corev1.Event
	waitUntil(ctx, t, fmt.Sprintf("event %s on %s %s", reason, kind, name), 2*time.Minute, func() error {
		evs := podnetEvents(ctx, t, c, kind, name, reason)
		if len(evs) == 0 {
			return errString("none yet")
		}
		e = evs[0]
		if e.Type != typ {
			return fmt.Errorf("type %s, want %s", e.Type, typ)
		}
		return nil
	})
	t.Logf("%s %s: %s %s: %s", kind, name, e.Type, e.Reason, e.Message)
	return e
}

func checkCNPCondition(ctx context.Context, t *testing.T, c *cluster.Cluster, name string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	dc, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: netpol.ClusterPolicyVersion.Group, Version: netpol.ClusterPolicyVersion.Version, Resource: netpol.ClusterPolicyResource}
	waitUntil(ctx, t, "ClusterNetworkPolicy "+name+" condition", time.Minute, func() error {
		u, err := dc.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		raw, _, _ := unstructuredConditions(u.Object)
		for _, cond := range raw {
			if cond.Type == netpol.ConditionAccepted {
				if cond.Status != status || cond.Reason != reason || cond.ObservedGeneration != u.GetGeneration() {
					return fmt.Errorf("condition %+v, want %s %s at generation %d", cond, status, reason, u.GetGeneration())
				}
				t.Logf("ClusterNetworkPolicy %s: %s=%s %s: %s", name, cond.Type, cond.Status, cond.Reason, cond.Message)
				return nil
			}
		}
		return fmt.Errorf("no %s condition in %v", netpol.ConditionAccepted, raw)
	})
}

func unstructuredConditions(obj map[string]any) ([]metav1.Condition, bool, error) {
	st, ok := obj["status"]
	if !ok {
		return nil, false, nil
	}
	b, err := json.Marshal(st)
	if err != nil {
		return nil, false, err
	}
	var s struct{ Conditions []metav1.Condition }
	err = json.Unmarshal(b, &s)
	return s.Conditions, true, err
}
