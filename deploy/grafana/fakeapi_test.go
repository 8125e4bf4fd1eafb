package grafana

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podnet/podnet/netns"
)

// The fake API's objects: node a (this agent's), namespace shop, pod
// shop/web on a, a NetworkPolicy isolating web for ingress and another
// allowing port 80 to it; so that the policy service compiles, applies,
// and counts packets for a pod.
const (
	fakeNode = `{"kind":"Node","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"1","uid":"u-a"},
		"spec":{"podCIDR":"10.244.0.0/24","podCIDRs":["10.244.0.0/24"]},
		"status":{"addresses":[{"type":"InternalIP","address":"198.18.0.20"}],"conditions":[{"type":"Ready","status":"True"}]}}`
	fakeNamespace = `{"metadata":{"name":"shop","resourceVersion":"1","uid":"u-ns","labels":{"kubernetes.io/metadata.name":"shop"}}}`
	fakePod       = `{"metadata":{"namespace":"shop","name":"web","resourceVersion":"1","uid":"u-web","labels":{"app":"web"}},
		"spec":{"nodeName":"a","containers":[{"name":"c","ports":[{"name":"http","containerPort":80}]}]},
		"status":{"phase":"Running","podIP":"10.244.0.5","podIPs":[{"ip":"10.244.0.5"}]}}`
	fakePolicies = `{"metadata":{"namespace":"shop","name":"deny-all","resourceVersion":"1","uid":"u-np1"},
		"spec":{"podSelector":{},"policyTypes":["Ingress"]}},
		{"metadata":{"namespace":"shop","name":"web","resourceVersion":"1","uid":"u-np2"},
		"spec":{"podSelector":{"matchLabels":{"app":"web"}},"policyTypes":["Ingress"],"ingress":[{"ports":[{"port":80}]}]}}`
)

var fakeLists = map[string]string{
	"/api/v1/nodes":      `{"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[` + fakeNode + `]}`,
	"/api/v1/namespaces": `{"kind":"NamespaceList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[` + fakeNamespace + `]}`,
	"/api/v1/pods":       `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[` + fakePod + `]}`,
	"/apis/networking.k8s.io/v1/networkpolicies": `{"kind":"NetworkPolicyList","apiVersion":"networking.k8s.io/v1","metadata":{"resourceVersion":"1"},"items":[` +
		fakePolicies + `]}`,
}

// fakeAPI answers what the agent asks of the API server: its Node (get
// and patch), lists of the objects above, and watches that stay open
// without events. Anything else is 404 (ClusterNetworkPolicies are not
// served). A watch that asks for the initial events in the stream
// (client-go's watch-list) is refused, so the informers list instead.
func fakeAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	q := r.URL.Query()
	switch {
	case q.Get("watch") == "true" || q.Get("watch") == "1":
		if q.Get("sendInitialEvents") == "true" {
			http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"BadRequest","code":400}`, http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	case r.URL.Path == "/api/v1/nodes/a":
		fmt.Fprint(w, fakeNode)
	case fakeLists[r.URL.Path] != "":
		fmt.Fprint(w, fakeLists[r.URL.Path])
	default:
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"message":"%s not served"}`, r.URL.Path)
	}
}

// startFakeAPI serves fakeAPI on 127.0.0.1 inside the namespace at ns
// (the listening socket is the namespace's: the agent there reaches it)
// and returns a kubeconfig for it.
func startFakeAPI(t *testing.T, ns string) string {
	var l net.Listener
	err := netns.Do(ns, func() (err error) {
		l, err = net.Listen("tcp", "127.0.0.1:6443")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(fakeAPI))
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	kc := strings.Join([]string{
		"apiVersion: v1", "kind: Config", "current-context: fake",
		"clusters:", "- name: fake", "  cluster:", "    server: http://127.0.0.1:6443",
		"contexts:", "- name: fake", "  context:", "    cluster: fake", "    user: fake",
		"users:", "- name: fake", "  user: {}", ""}, "\n")
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
