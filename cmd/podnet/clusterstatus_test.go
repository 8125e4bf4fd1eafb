package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestAgentOf: the agent container's state in words, its error from the
// termination message, a signal's kill without the log's last line.
func TestAgentOf(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "podnet-x"}, Spec: corev1.PodSpec{NodeName: "n2"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "agent", RestartCount: 2,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1,
					Message: "time=... level=INFO msg=start\npodnet: open /var/lib/podnet/ipam.db: invalid database\n"}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 137, Message: "level=INFO msg=x"}}}}}}
	a := agentOf(p)
	if a.Pod != "podnet-x" || a.Node != "n2" || a.Ready || a.Restarts != 2 ||
		a.Container != "terminated: Error, exit code 1: podnet: open /var/lib/podnet/ipam.db: invalid database" ||
		a.LastTermination != "Error, exit code 137 (killed by signal 9)" {
		t.Errorf("%+v", a)
	}
	p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 10s restarting failed container"}}
	if a := agentOf(p); a.Container != "waiting: CrashLoopBackOff back-off 10s restarting failed container" {
		t.Errorf("%q", a.Container)
	}
}

func TestNodeOf(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{PodCIDR: "10.244.0.0/24"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady", Message: "network not ready"}}}}
	got := nodeOf(n)
	if got.Ready || got.NotReadyReason != "KubeletNotReady network not ready" || len(got.PodCIDRs) != 1 {
		t.Errorf("%+v", got)
	}
}

// TestStatusCluster runs `podnet status --kubeconfig` against a fake API
// server: two Nodes, one agent pod whose /status the pod proxy answers,
// none on the other Node; the podnet.io group not served. It exits 1
// naming the node without an agent, and reads the other's document.
func TestStatusCluster(t *testing.T) {
	doc := `{"node":"n1","version":"v9","datastore":"kubernetes","ipam":"node-cidr","routingMode":"vxlan","encryption":{"mode":"none","peers":0},` +
		`"ready":true,"services":[{"name":"source","ready":true}],"attachments":4,"time":"2026-01-01T00:00:00Z"}`
	bodies := map[string]string{
		"/api/v1/nodes": `{"kind":"NodeList","apiVersion":"v1","items":[` +
			`{"metadata":{"name":"n1"},"spec":{"podCIDRs":["10.244.0.0/24"]},"status":{"conditions":[{"type":"Ready","status":"True"}]}},` +
			`{"metadata":{"name":"n2"},"spec":{"podCIDRs":["10.244.1.0/24"]},"status":{"conditions":[{"type":"Ready","status":"True"}]}}]}`,
		"/api/v1/namespaces/kube-system/pods": `{"kind":"PodList","apiVersion":"v1","items":[{"metadata":{"name":"podnet-a","namespace":"kube-system"},` +
			`"spec":{"nodeName":"n1","containers":[{"name":"agent","ports":[{"name":"metrics","containerPort":9700}]}]},` +
			`"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}],"containerStatuses":[{"name":"agent","ready":true,"state":{"running":{}}}]}}]}`,
		"/api/v1/namespaces/kube-system/pods/http:podnet-a:9700/proxy/status": doc,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/namespaces/kube-system/pods" && r.URL.Query().Get("labelSelector") != "app.kubernetes.io/name=podnet" {
			t.Errorf("agent pods listed with %q", r.URL.RawQuery)
		}
		body, ok := bodies[r.URL.Path]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			body = `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	kc, err := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Config", "current-context": "c",
		"clusters": []any{map[string]any{"name": "c", "cluster": map[string]any{"server": srv.URL}}},
		"users":    []any{map[string]any{"name": "u", "user": map[string]any{}}},
		"contexts": []any{map[string]any{"name": "c", "context": map[string]any{"cluster": "c", "user": "u"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"status", "--kubeconfig", path})
	err = root.ExecuteContext(t.Context())
	var code exitCode
	if !errors.As(err, &code) || code != 1 {
		t.Errorf("exit %v, want exit status 1", err)
	}
	for _, want := range []string{"n1    ready      v9       kubernetes/node-cidr  vxlan", "n2    NOT READY", "node n2: no podnet agent pod",
		"CRDs: podnet.io: none; ClusterNetworkPolicy: not installed"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
