package kubeapi

import (
	"net/http"
	"net/url"
	"testing"
)

func TestRequestVerb(t *testing.T) {
	for _, c := range []struct{ method, url, want string }{
		{"GET", "/api/v1/nodes", "LIST"},
		{"GET", "/api/v1/nodes?resourceVersion=0", "LIST"},
		{"GET", "/api/v1/nodes?watch=true&resourceVersion=5", "WATCH"},
		{"GET", "/api/v1/nodes/n1", "GET"},
		{"GET", "/apis/podnet.io/v1/ipamblocks", "LIST"},
		{"GET", "/apis/podnet.io/v1/ipamblocks/10-244-0-0-26", "GET"},
		{"GET", "/api/v1/namespaces/kube-system/pods", "LIST"},
		{"GET", "/api/v1/namespaces/kube-system", "GET"},
		{"GET", "/api/v1/namespaces", "LIST"},
		{"GET", "/apis/podnet.io/v1/ipamblocks/b/status", "GET"},
		{"GET", "/version", "GET"},
		{"PUT", "/apis/podnet.io/v1/ipamblocks/b", "PUT"},
		{"PATCH", "/api/v1/nodes/n1", "PATCH"},
	} {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := requestVerb(&http.Request{Method: c.method, URL: u}); got != c.want {
			t.Errorf("%s %s: %s, want %s", c.method, c.url, got, c.want)
		}
	}
}
