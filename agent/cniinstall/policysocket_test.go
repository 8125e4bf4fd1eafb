package cniinstall

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestInstallPolicySocket: with network policy on, every podnet plugin
// of the installed config names the handshake's socket; with it off, a
// socket the config file names is removed (no agent would open the pods
// its plugins close).
func TestInstallPolicySocket(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "in.conflist")
	if err := os.WriteFile(src, []byte(`{"cniVersion":"1.0.0","name":"podnet","plugins":[
		{"type":"podnet","policySocket":"/stale.sock","ipam":{"type":"podnet-ipam","pools":[{"name":"p","cidr":"10.244.0.0/16"}]}},
		{"type":"bandwidth"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ socket, want string }{{"/run/podnet/policy.sock", "/run/podnet/policy.sock"}, {"", ""}} {
		c := Config{ConfDir: dir, NetworkConfig: src, policySocket: tc.socket}
		f, err := c.conf("n1", nil)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Plugins []map[string]any `json:"plugins"`
		}
		if err := json.Unmarshal(f.data, &doc); err != nil {
			t.Fatal(err)
		}
		got, _ := doc.Plugins[0]["policySocket"].(string)
		if got != tc.want {
			t.Errorf("socket %q: podnet's policySocket %q, want %q", tc.socket, got, tc.want)
		}
		if _, ok := doc.Plugins[1]["policySocket"]; ok {
			t.Errorf("socket %q: another plugin got policySocket", tc.socket)
		}
	}
}
