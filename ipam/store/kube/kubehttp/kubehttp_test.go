package kubehttp

import (
	"net/http"
	"testing"
)

func TestNewHost(t *testing.T) {
	rt := http.DefaultTransport
	for host, want := range map[string]string{
		"https://10.96.0.1:443":         "https://10.96.0.1:443",
		"10.96.0.1:6443":                "https://10.96.0.1:6443",
		"https://proxy/k8s/clusters/c/": "https://proxy/k8s/clusters/c",
		"http://127.0.0.1:8080":         "http://127.0.0.1:8080",
		"ftp://x":                       "",
		"https://":                      "",
		"https://api/?watch=1":          "",
	} {
		tr, err := New(rt, host)
		switch {
		case want == "" && err == nil:
			t.Errorf("New(%q) = %s, want an error", host, tr.Server())
		case want != "" && (err != nil || tr.Server() != want):
			t.Errorf("New(%q) = %v, %v; want %s", host, tr, err, want)
		}
	}
	if _, err := New(nil, "https://api"); err == nil {
		t.Error("New without a round tripper: no error")
	}
}
