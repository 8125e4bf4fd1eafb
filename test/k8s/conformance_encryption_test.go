package k8s_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/podnet/podnet/test/k8s/cluster"
)

// conformanceEncryptionEnv turns WireGuard on for the judged cluster:
// the ConfigMap's encryption key as an operator sets it (issue 31: the
// Services and NetworkPolicy selections pass with encryption on).
const conformanceEncryptionEnv = "PODNET_CONFORMANCE_ENCRYPTION" // none (default) or wireguard

// conformanceEncryption is the encryption PODNET_CONFORMANCE_ENCRYPTION
// names: "" for none.
func conformanceEncryption(t *testing.T) string {
	switch v := os.Getenv(conformanceEncryptionEnv); v {
	case "", "none":
		return ""
	case "wireguard":
		return v
	default:
		t.Fatalf("%s=%q: none or wireguard", conformanceEncryptionEnv, v)
		return ""
	}
}

// withEncryption is a Deploy edit setting the ConfigMap's encryption key
// to enc (nothing when enc is empty).
func withEncryption(enc string) func(*cluster.Manifests) {
	if enc == "" {
		return nil
	}
	return func(m *cluster.Manifests) { m.ConfigMap.Data["encryption"] = enc }
}

// waitEncryptedRoutes waits until every node routes the other nodes'
// pods through podnet.wg and nothing of the agent's routes is
// unreachable (a peer without a key): the judges then run on the
// encrypted path, not beside it.
func waitEncryptedRoutes(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	waitUntil(ctx, t, "routes to the other nodes' pods through podnet.wg", 2*time.Minute, func() error {
		for _, n := range c.Nodes {
			routes := agentRoutes(t, n)
			var wg int
			for _, line := range strings.Split(strings.TrimSpace(routes), "\n") {
				switch {
				case strings.HasPrefix(line, "unreachable ") && !strings.Contains(line, "metric 9797"):
					return fmt.Errorf("%s: %q", n.Name, line)
				case strings.Contains(line, " dev podnet.wg "):
					wg++
				}
			}
			if wg < len(c.Nodes)-1 {
				return fmt.Errorf("%s: %d routes through podnet.wg, want %d:\n%s", n.Name, wg, len(c.Nodes)-1, routes)
			}
		}
		return nil
	})
}
