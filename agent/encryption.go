package agent

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/podnet/podnet/agent/route"
	"github.com/podnet/podnet/agent/wireguard"
)

// Encryption settings (Config.Encryption, --encryption).
const (
	EncryptionNone      = "none"
	EncryptionWireGuard = "wireguard"
)

// checkEncryption checks cfg's encryption settings, defaulting none.
func checkEncryption(cfg *Config) error {
	switch cfg.Encryption {
	case "":
		cfg.Encryption = EncryptionNone
	case EncryptionNone, EncryptionWireGuard:
	default:
		return fmt.Errorf("agent: encryption %q: want %s or %s", cfg.Encryption, EncryptionNone, EncryptionWireGuard)
	}
	if cfg.WireGuardPort < 0 || cfg.WireGuardPort > 65535 {
		return fmt.Errorf("agent: wireguard port %d: want 1 to 65535", cfg.WireGuardPort)
	}
	return nil
}

// newWireGuard is the WireGuard service with encryption on, its routes
// set to go through podnet.wg in rc; nil with encryption off, when
// nothing of it runs.
func newWireGuard(cfg Config, rc *route.Config, reg prometheus.Registerer, log *slog.Logger) *wireguard.Service {
	if cfg.Encryption != EncryptionWireGuard {
		return nil
	}
	wg := wireguard.New(wireguard.Config{Node: cfg.Node, Port: cfg.WireGuardPort, KeyFile: cfg.WireGuardKeyFile, NetNS: cfg.NetNS, Registry: reg, Logger: log})
	rc.WireGuard, rc.Peers = true, wg
	return wg
}
