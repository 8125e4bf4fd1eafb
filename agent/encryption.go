package agent

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/podnet/podnet/agent/clusterstate"
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

// publisher publishes the node's WireGuard public key in its own record
// (wireguard.Publisher): the source registers the change, and the
// agent's view of the datastore says when it is there.
type publisher struct {
	self *clusterstate.Self
	view *clusterstate.View
	node string
}

func (p publisher) Publish(key string) {
	p.self.Update(func(r *clusterstate.NodeRecord) { r.WireGuardKey = key })
}

func (p publisher) Published() (key string) {
	p.view.Read(func(s *clusterstate.State) {
		rec, _ := s.Node(p.node)
		key = rec.WireGuardKey
	})
	return key
}
