package agent

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/podnet/podnet/agent/agentstatus"
)

// TestHealthzAsksNoService: with a service whose readiness hangs (a
// readiness that would wait for a rebuild's lock), /healthz still
// answers 200 at once: the liveness probe never restarts a busy agent.
func TestHealthzAsksNoService(t *testing.T) {
	hang := make(chan struct{})
	defer close(hang)
	srv := httptest.NewServer(handler(prometheus.NewRegistry(), func() []status { <-hang; return nil }, func() agentstatus.Document { <-hang; return agentstatus.Document{} }, flowsUnavailable(flowsOff)))
	defer srv.Close()
	c := &http.Client{Timeout: time.Second}
	resp, err := c.Get(srv.URL + "/healthz")
	if err != nil {
		t.Fatalf("/healthz behind a hung readiness: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz %d", resp.StatusCode)
	}
}

// TestDegradedHandler: a degraded agent is alive, not ready with every
// reason, and says its config is not valid.
func TestDegradedHandler(t *testing.T) {
	d := NewDegraded([]error{&ConfigError{Key: "routing_mode", Value: "hostgw", Want: "want host-gw, vxlan or auto"}, errors.New("second")},
		prometheus.NewRegistry(), nil)
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz %d", code)
	}
	code, body := get("/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, `config: not ready: routing_mode "hostgw": want host-gw, vxlan or auto`) ||
		!strings.Contains(body, "second") {
		t.Errorf("/readyz %d:\n%s", code, body)
	}
	if _, m := get("/metrics"); !strings.Contains(m, "podnet_agent_config_valid 0") {
		t.Errorf("metrics:\n%s", m)
	}
}

func TestSettingsCheck(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		s    Settings
		want []string
	}{
		{"good", Settings{RoutingMode: "auto", ClusterCIDRs: []string{"10.244.0.0/16", " fd00:10:244::/56"}}, nil},
		{"empty mode is auto", Settings{}, nil},
		{"encryption none", Settings{Encryption: "none"}, nil},
		{"encryption wireguard", Settings{Encryption: "wireguard"}, nil},
		{"encryption case", Settings{Encryption: "WireGuard"}, []string{`encryption "WireGuard": want none or wireguard`}},
		{"encryption ipsec", Settings{Encryption: "ipsec"}, []string{`encryption "ipsec": want none or wireguard`}},
		{"all bad", Settings{RoutingMode: "hostgw", Encryption: "wg", ClusterCIDRs: []string{"10.244.0.1/16", "x"}, NetworkConfig: dir + "/missing.conflist"},
			[]string{`routing_mode "hostgw": want host-gw, vxlan or auto`, `encryption "wg": want none or wireguard`, `cluster_cidr "10.244.0.1/16"`, `cluster_cidr "x"`,
				`missing.conflist "` + dir + `/missing.conflist": cannot be read`}},
	} {
		errs := tc.s.Check()
		if len(errs) != len(tc.want) {
			t.Errorf("%s: %v, want %d errors", tc.name, errs, len(tc.want))
			continue
		}
		for i, err := range errs {
			if !IsConfigError(err) || !strings.HasPrefix(err.Error(), tc.want[i]) {
				t.Errorf("%s: %v, want %q", tc.name, err, tc.want[i])
			}
		}
	}
}
