package wireguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/podnet/podnet/agent/clusterstate"
	"github.com/podnet/podnet/agent/route"
	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/netns"
)

// Config configures the WireGuard service.
type Config struct {
	Node string
	// Port is the UDP port the device listens on (default DefaultPort).
	Port int
	// KeyFile keeps the private key (default DefaultKeyFile).
	KeyFile string
	// NetNS is the namespace of the device (a path); empty: the
	// process's own, the only one where a userspace device can run.
	NetNS    string
	Registry prometheus.Registerer
	Logger   *slog.Logger
}

// Service holds the node's key and podnet.wg, and keeps the device's
// peers (route.PeerSyncer). Setup prepares it; a failed Setup (a key
// file that cannot be used, no device) leaves it not ready, and the
// routes through podnet.wg unreachable: never in the clear.
type Service struct {
	cfg    Config
	key    wgtypes.Key
	dev    *wgDevice
	client *wgctrl.Client
	err    error
	up     chan struct{}

	mu      sync.Mutex
	skipped map[string]string // node -> reason last logged
	info    *prometheus.GaugeVec
	peers   prometheus.Gauge
	// impl and npeers are what Status reads, without a lock.
	impl   atomic.Pointer[string]
	npeers atomic.Int64
}

// New returns the service, its metrics registered.
func New(cfg Config) *Service {
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	if cfg.KeyFile == "" {
		cfg.KeyFile = DefaultKeyFile
	}
	s := &Service{cfg: cfg, up: make(chan struct{}), skipped: map[string]string{},
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "podnet", Subsystem: "agent", Name: "wireguard_info",
			Help: "1 for the implementation of podnet.wg the agent runs: kernel or userspace (wireguard-go in the agent).",
		}, []string{"implementation"}),
		peers: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "podnet", Subsystem: "agent", Name: "wireguard_peers",
			Help: "Peers configured on podnet.wg after the last reconcile.",
		}),
	}
	cfg.Registry.MustRegister(s.info, s.peers)
	return s
}

// Setup loads or creates the key and opens podnet.wg with mtu (the
// underlay's less WireGuard's overhead). Its error is also what Ready
// says from then on.
func (s *Service) Setup(underlayMTU int, underlay6 bool) error {
	s.err = s.setup(underlayMTU - route.WireGuardOverhead(underlay6))
	if s.err != nil {
		s.cfg.Logger.Error("wireguard not ready: pod traffic to other nodes is refused, never sent in the clear", "err", s.err)
		return s.err
	}
	close(s.up)
	mode := s.dev.mode
	s.impl.Store(&mode)
	s.info.WithLabelValues(s.dev.mode).Set(1)
	s.cfg.Logger.Info("wireguard ready", "device", route.WireGuardDevice, "implementation", s.dev.mode,
		"port", s.cfg.Port, "public_key", s.key.PublicKey().String(), "mtu", underlayMTU-route.WireGuardOverhead(underlay6))
	return nil
}

func (s *Service) setup(mtu int) error {
	key, created, err := LoadOrCreateKey(s.cfg.KeyFile)
	if err != nil {
		return err
	}
	if created {
		s.cfg.Logger.Info("wireguard key created", "file", s.cfg.KeyFile)
	}
	s.key = key
	open := func() error {
		h, err := dataplane.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		s.dev, err = openDevice(h, mtu, s.cfg.NetNS == "", s.cfg.Logger)
		if err != nil {
			return err
		}
		// wgctrl's netlink socket must be in the device's namespace.
		s.client, err = wgctrl.New()
		return err
	}
	if s.cfg.NetNS != "" {
		err = netns.Do(s.cfg.NetNS, open)
	} else {
		err = open()
	}
	if err == nil {
		// The key and port only: the peers stay as they are, so a
		// restart of the agent on a kernel device interrupts nothing.
		err = s.client.ConfigureDevice(route.WireGuardDevice, wgtypes.Config{PrivateKey: &key, ListenPort: &s.cfg.Port})
	}
	if err != nil {
		s.Close()
		return fmt.Errorf("wireguard: %w", err)
	}
	return nil
}

// PublicKey is the node's public key for its record; empty when Setup
// failed, so peers refuse this node rather than expect a key it does
// not have.
func (s *Service) PublicKey() string {
	if s.err != nil || s.dev == nil {
		return ""
	}
	return s.key.PublicKey().String()
}

// Mode is the device's implementation, Kernel or Userspace; empty before
// a successful Setup.
func (s *Service) Mode() string {
	if s.dev == nil {
		return ""
	}
	return s.dev.mode
}

// Status is the device's implementation (empty before a successful
// Setup) and its peers after the last reconcile. It takes no lock: the
// agent's /status calls it while Setup or a reconcile may run.
func (s *Service) Status() (implementation string, peers int) {
	if p := s.impl.Load(); p != nil {
		implementation = *p
	}
	return implementation, int(s.npeers.Load())
}

// Ready is Setup's error, or nil.
func (s *Service) Ready() error {
	select {
	case <-s.up:
		return nil
	default:
	}
	if s.err != nil {
		return s.err
	}
	return errors.New("wireguard: not set up yet")
}

// Up is closed after a successful Setup.
func (s *Service) Up() <-chan struct{} { return s.up }

// Run waits for ctx: the peers are kept from the route service's
// reconcile (SyncPeers).
func (s *Service) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// Close ends a userspace device and wgctrl's client; a kernel device
// stays with its peers.
func (s *Service) Close() {
	if s.client != nil {
		s.client.Close()
		s.client = nil
	}
	if err := s.dev.close(); err != nil {
		s.cfg.Logger.Warn("wireguard: close userspace device", "err", err)
	}
}

// SyncPeers makes podnet.wg's peers those of d's WireGuard routes
// (route.PeerSyncer).
func (s *Service) SyncPeers(d route.Desired, nodes map[string]clusterstate.NodeRecord) error {
	if s.client == nil {
		return errors.New("wireguard: no device")
	}
	want, skipped := DesiredPeers(d, nodes, s.cfg.Node, s.cfg.Port)
	s.logSkipped(skipped)
	dev, err := s.client.Device(route.WireGuardDevice)
	if err != nil {
		return fmt.Errorf("wireguard: read %s: %w", route.WireGuardDevice, err)
	}
	changes := PeerChanges(dev.Peers, want)
	if len(changes) > 0 {
		if err := s.client.ConfigureDevice(route.WireGuardDevice, wgtypes.Config{Peers: changes}); err != nil {
			return fmt.Errorf("wireguard: configure %d peer changes on %s: %w", len(changes), route.WireGuardDevice, err)
		}
		s.cfg.Logger.Info("wireguard peers reconciled", "peers", len(want), "changes", len(changes))
	}
	s.peers.Set(float64(len(want)))
	s.npeers.Store(int64(len(want)))
	return nil
}

// logSkipped logs each node left without a peer once per reason.
func (s *Service) logSkipped(skipped []Skipped) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := map[string]string{}
	for _, k := range skipped {
		now[k.Node] = k.Reason
		if s.skipped[k.Node] != k.Reason {
			s.cfg.Logger.Warn("wireguard peer skipped: its pods are unreachable until it has a usable key", "peer_node", k.Node, "reason", k.Reason)
		}
	}
	s.skipped = now
}

// compile-time check that the service is what the route service calls.
var _ route.PeerSyncer = (*Service)(nil)
