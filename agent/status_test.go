package agent

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/podnet/podnet/agent/agentstatus"
	"github.com/podnet/podnet/agent/route"
)

func getStatus(t *testing.T, h http.Handler) agentstatus.Document {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + agentstatus.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%s: %d %q", agentstatus.Path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var d agentstatus.Document
	dec := json.NewDecoder(resp.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("decode: %v", err)
	}
	return d
}

// TestStatusDocument: an agent's /status says what its config makes it
// and each service's readiness, the reasons of those not ready, and
// answers 200 while not ready so that one request gives the reasons.
func TestStatusDocument(t *testing.T) {
	cache := t.TempDir()
	cfg := Config{Node: "n1", Kube: &KubeConfig{}, Mode: route.ModeVXLAN, Encryption: EncryptionNone, CacheDir: cache}
	a := &Agent{cfg: cfg, reg: prometheus.NewRegistry()}
	a.services = []service{{name: "source", ready: func() error { return nil }},
		{name: "routes", ready: func() error { return errors.New("underlay gone") }}}
	d := getStatus(t, a.Handler())
	if d.Node != "n1" || d.Datastore != "kubernetes" || d.IPAM != "node-cidr" || d.RoutingMode != "vxlan" || d.Encryption.Mode != "none" {
		t.Errorf("describe: %+v", d)
	}
	if d.Ready || len(d.Services) != 2 || !d.Services[0].Ready || d.Services[1].Ready || d.Services[1].Reason != "underlay gone" {
		t.Errorf("services: ready %v %+v", d.Ready, d.Services)
	}
	if d.Version == "" || d.Policy != nil || d.Attachments != 0 || d.Time.IsZero() {
		t.Errorf("document: %+v", d)
	}
}

func TestDescribeModels(t *testing.T) {
	for _, tc := range []struct {
		cfg             Config
		datastore, ipam string
	}{
		{Config{}, "etcd", "etcd"},
		{Config{Kube: &KubeConfig{}}, "kubernetes", "node-cidr"},
		{Config{Kube: &KubeConfig{Blocks: &KubeBlocks{}}}, "kubernetes", "blocks"},
	} {
		if d := tc.cfg.describe(); d.Datastore != tc.datastore || d.IPAM != tc.ipam {
			t.Errorf("%+v: %s %s, want %s %s", tc.cfg, d.Datastore, d.IPAM, tc.datastore, tc.ipam)
		}
	}
}

// TestDegradedStatus: a degraded agent's document is not ready, says
// degraded and why.
func TestDegradedStatus(t *testing.T) {
	d := NewDegraded([]error{&ConfigError{Key: "routing_mode", Value: "hostgw", Want: "want host-gw, vxlan or auto"}}, prometheus.NewRegistry(), nil)
	d.Node = "n2"
	doc := getStatus(t, d.Handler())
	if doc.Node != "n2" || doc.Ready || !doc.Degraded || len(doc.Services) != 1 || doc.Services[0].Name != "config" ||
		doc.Services[0].Reason != `routing_mode "hostgw": want host-gw, vxlan or auto` {
		t.Errorf("%+v", doc)
	}
}

func TestCountAttachments(t *testing.T) {
	dir := t.TempDir()
	if n := countAttachments(dir); n != 0 {
		t.Errorf("no results dir: %d", n)
	}
	res := filepath.Join(dir, "results")
	if err := os.MkdirAll(filepath.Join(res, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"podnet-c1-eth0", "podnet-c2-eth0", "cni-loopback-c1-lo", ".podnet-c3-eth0.tmp-123"} {
		if err := os.WriteFile(filepath.Join(res, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if n := countAttachments(dir); n != 2 {
		t.Errorf("%d attachments, want 2", n)
	}
}
