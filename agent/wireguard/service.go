package wireguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

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
	// KeyCheckInterval is how often the running agent reads KeyFile
	// for a new key (default DefaultKeyCheckInterval).
	KeyCheckInterval time.Duration
	// NetNS is the namespace of the device (a path); empty: the
	// process's own, the only one where a userspace device can run.
	NetNS    string
	Registry prometheus.Registerer
	Logger   *slog.Logger
}

// Service holds the node's key and podnet.wg, and keeps the device's
// peers (route.PeerSyncer). Setup prepares it; a failed Setup (a key
// file that cannot be used, no device) leaves it not ready, and the
// routes through podnet.wg unreachable: never in the clear. Run follows
// the key file for a rotated key (rotate.go).
type Service struct {
	cfg    Config
	dev    *wgDevice
	client *wgctrl.Client
	err    error
	up     chan struct{}
	pub    Publisher
	// keyErr is the running key file's trouble, for Ready.
	keyErr atomic.Pointer[error]

	// devMu serializes the device's configuration: the route service's
	// peers and Run's key.
	devMu sync.Mutex
	keyMu sync.Mutex
	key   wgtypes.Key

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
	if cfg.KeyCheckInterval <= 0 {
		cfg.KeyCheckInterval = DefaultKeyCheckInterval
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
	s.keyMu.Lock()
	defer s.keyMu.Unlock()
	return s.key.PublicKey().String()
}

// SetPublisher gives the service where its public key goes when the
// key file gets a new key; before Run.
func (s *Service) SetPublisher(p Publisher) { s.pub = p }

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

// Ready is Setup's error, or the key file's since (unreadable, not a
// key), or nil.
func (s *Service) Ready() error {
	select {
	case <-s.up:
		if p := s.keyErr.Load(); p != nil {
			return *p
		}
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

// Run follows the key file until ctx ends (keyWatch): a new key is
// published, then set on the device, then handshakes restarted until
// every peer answers under it. The peers are kept from the route
// service's reconcile (SyncPeers). After a failed Setup it only waits:
// the agent is not ready until it restarts with a usable file.
func (s *Service) Run(ctx context.Context) error {
	if s.client == nil || s.pub == nil {
		<-ctx.Done()
		return nil
	}
	w := &keyWatch{file: s.cfg.KeyFile, current: s.key, publisher: s.pub, setKey: s.setKey, log: s.cfg.Logger}
	var hs handshakeRetry
	t := time.NewTimer(s.cfg.KeyCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		prev := w.current
		soon, err := w.check(time.Now())
		if err != nil {
			s.keyErr.Store(&err)
		} else {
			s.keyErr.Store(nil)
		}
		if w.current != prev {
			hs = handshakeRetry{since: w.rotated, wait: handshakeRetryFirst}
		}
		delay := s.cfg.KeyCheckInterval
		if soon {
			delay = publishPoll
		}
		if d, ok := hs.step(s.handshakes, s.cfg.Logger); ok {
			delay = min(delay, d)
		}
		t.Reset(delay)
	}
}

// setKey puts key on the device. Every session ends with the old key,
// and a handshake under the new one starts with each peer's next packet
// (handshakes restart it at once).
func (s *Service) setKey(key wgtypes.Key) error {
	s.devMu.Lock()
	defer s.devMu.Unlock()
	if err := s.client.ConfigureDevice(route.WireGuardDevice, wgtypes.Config{PrivateKey: &key}); err != nil {
		return err
	}
	s.keyMu.Lock()
	s.key = key
	s.keyMu.Unlock()
	return nil
}

// handshakes starts a handshake now with every peer that has had none
// since t (RestartHandshakes), and says how many it started. Only the
// node whose key changed does, again and again until each peer
// answers: the peers take its new key when they see it, a moment before
// or after the device does, and a handshake refused because it came
// first would otherwise be tried again only 5 s later. The peers never
// start one of their own on a key change, so two handshakes never cross
// (each would drop the other's answer).
func (s *Service) handshakes(t time.Time) (int, error) {
	s.devMu.Lock()
	defer s.devMu.Unlock()
	dev, err := s.client.Device(route.WireGuardDevice)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", route.WireGuardDevice, err)
	}
	changes := RestartHandshakes(dev.Peers, t, kickInterval)
	if len(changes) == 0 {
		return 0, nil
	}
	if err := s.client.ConfigureDevice(route.WireGuardDevice, wgtypes.Config{Peers: changes}); err != nil {
		return 0, fmt.Errorf("restart handshakes on %s: %w", route.WireGuardDevice, err)
	}
	if err := s.client.ConfigureDevice(route.WireGuardDevice, wgtypes.Config{Peers: KeepaliveOff(changes)}); err != nil {
		return 0, fmt.Errorf("keepalive off on %s: %w", route.WireGuardDevice, err)
	}
	return len(changes) / 2, nil
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
	s.devMu.Lock()
	defer s.devMu.Unlock()
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
