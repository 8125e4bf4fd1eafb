package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/podnet/podnet/policy/explain"
)

// TestPolicyExplain runs `podnet policy explain` against a fake API
// server: one list of each kind, the unfinished pods asked for, a Node
// list refused (403) and done without, ClusterNetworkPolicies listed
// (and, in the last run, not served: 404, done without), text and JSON
// out.
func TestPolicyExplain(t *testing.T) {
	const cnpPath = "/apis/policy.networking.k8s.io/v1beta1/clusternetworkpolicies"
	lists := map[string]string{
		"/api/v1/pods": `{"kind":"PodList","apiVersion":"v1","items":[
			{"metadata":{"namespace":"shop","name":"web","labels":{"app":"web"}},"spec":{"nodeName":"n1","containers":[{"name":"c"}]},"status":{"phase":"Running","podIPs":[{"ip":"10.244.0.1"}]}},
			{"metadata":{"namespace":"shop","name":"db","labels":{"app":"db"}},"spec":{"nodeName":"n1","containers":[{"name":"c","ports":[{"name":"pg","containerPort":5432}]}]},"status":{"phase":"Running","podIPs":[{"ip":"10.244.0.2"}]}}]}`,
		"/api/v1/namespaces": `{"kind":"NamespaceList","apiVersion":"v1","items":[{"metadata":{"name":"shop"}}]}`,
		"/apis/networking.k8s.io/v1/networkpolicies": `{"kind":"NetworkPolicyList","apiVersion":"networking.k8s.io/v1","items":[
			{"metadata":{"namespace":"shop","name":"db"},"spec":{"podSelector":{"matchLabels":{"app":"db"}},
			 "ingress":[{"from":[{"podSelector":{"matchLabels":{"app":"web"}}}],"ports":[{"port":"pg"}]}]}}]}`,
		cnpPath: `{"kind":"ClusterNetworkPolicyList","apiVersion":"policy.networking.k8s.io/v1beta1","items":[
			{"metadata":{"name":"no-udp-to-db"},"spec":{"tier":"Admin","priority":10,
			 "subject":{"pods":{"namespaceSelector":{},"podSelector":{"matchLabels":{"app":"db"}}}},
			 "ingress":[{"name":"udp","action":"Deny","from":[{"namespaces":{}}],"protocols":[{"udp":{}}]}]}}]}`,
	}
	var noCRD bool
	var mu sync.Mutex
	requests := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests[r.URL.Path]++
		gone := noCRD
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/api/v1/pods" && r.URL.Query().Get("fieldSelector") != "status.phase!=Succeeded,status.phase!=Failed" {
			t.Errorf("pods listed with fieldSelector %q", r.URL.Query().Get("fieldSelector"))
		}
		body, ok := lists[r.URL.Path]
		if r.URL.Path == cnpPath && gone {
			w.WriteHeader(http.StatusNotFound)
			body = `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`
		} else if !ok {
			w.WriteHeader(http.StatusForbidden)
			body = `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403}`
		}
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
	run := func(args ...string) string {
		t.Helper()
		root := newRootCommand()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs(append([]string{"policy", "explain", "--kubeconfig", path}, args...))
		if err := root.ExecuteContext(t.Context()); err != nil {
			t.Fatalf("podnet policy explain %v: %v", args, err)
		}
		return out.String()
	}

	text := run("shop/web", "10.244.0.2", "--port", "pg")
	for _, want := range []string{
		"shop/web (10.244.0.1) -> shop/db (10.244.0.2) TCP/5432 (pg): ALLOWED",
		"ingress of shop/db: allowed by shop/db ingress rule 0",
		"note: no Nodes were read",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	var rep explain.Report
	if err := json.Unmarshal([]byte(run("shop/db", "shop/db", "--port", "1", "-o", "json")), &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.Allowed || rep.Ingress.Reason != "Self" {
		t.Errorf("db to itself: %+v", rep)
	}
	if err := json.Unmarshal([]byte(run("10.0.0.9", "shop/db", "--port", "5432", "-o", "json")), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Allowed || rep.Ingress.Reason != "Denied" || rep.Source.Kind != "external" {
		t.Errorf("external to db: %+v", rep)
	}

	// UDP to db: the Admin Deny decides, whatever NetworkPolicy says.
	text = run("shop/web", "shop/db", "--port", "53", "--protocol", "UDP")
	for _, want := range []string{
		"shop/web (10.244.0.1) -> shop/db (10.244.0.2) UDP/53: DENIED",
		"ingress of shop/db: DENIED by Admin no-udp-to-db (priority 10) rule 0 \"udp\" Deny, whatever NetworkPolicy says",
		"from[0] matches: every pod of namespaces (all); protocols[0] matches: UDP",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	if err := json.Unmarshal([]byte(run("shop/web", "shop/db", "--port", "53", "--protocol", "UDP", "-o", "json")), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Allowed || rep.Ingress.Reason != "DeniedByAdmin" || rep.Ingress.Admin == nil || rep.Ingress.Admin.Policy != "no-udp-to-db" ||
		rep.Ingress.Admin.Tier != "Admin" || rep.Ingress.Admin.Priority != 10 || rep.Ingress.Admin.Action != "Deny" || len(rep.Ingress.ClusterRules) != 1 {
		t.Errorf("UDP to db: %+v", rep.Ingress)
	}

	// Without the CRD the answer is NetworkPolicy's, and says so.
	mu.Lock()
	noCRD = true
	mu.Unlock()
	text = run("shop/web", "shop/db", "--port", "53", "--protocol", "UDP")
	if !strings.Contains(text, "ingress of shop/db: DENIED: isolated by shop/db") || !strings.Contains(text, "note: ClusterNetworkPolicies were not read (the API server does not serve them") {
		t.Errorf("without the CRD:\n%s", text)
	}

	mu.Lock()
	defer mu.Unlock()
	for _, p := range []string{"/api/v1/pods", "/api/v1/namespaces", "/apis/networking.k8s.io/v1/networkpolicies", "/api/v1/nodes", cnpPath} {
		if requests[p] != 6 {
			t.Errorf("%s: %d requests, want one per run (6)", p, requests[p])
		}
	}
}
