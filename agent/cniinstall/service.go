package cniinstall

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// ServiceConfig is what the install service needs of the rest of the
// agent.
type ServiceConfig struct {
	// Node is this node's name; Mode the agent's routing mode (for the
	// MTU warning).
	Node, Mode string
	// PodMTU is what the config gives every podnet plugin that sets no
	// MTU (route.PodMTU of the underlay); 0 gives none.
	PodMTU int
	// PolicySocket is the policy agent's first-packet handshake socket
	// (agent/netpol/admitsock), written as policySocket into every
	// podnet plugin of the config: with --network-policy. Empty removes
	// it, so that no plugin closes pods that no agent would open.
	PolicySocket string
	// After are closed when the node may get its config: registered,
	// routes programmed, and in block IPAM the socket serving.
	After []<-chan struct{}
	// PodCIDRs are this node's podCIDRs, and PodCIDRsChanged is
	// signalled when they may have changed: the node-CIDR model's.
	PodCIDRs        func() []netip.Prefix
	PodCIDRsChanged <-chan struct{}
	Logger          *slog.Logger
}

// Service installs the plugins and the network config once the node is
// ready for pods, and in the node-CIDR model writes the config again
// whenever the node's podCIDRs change.
type Service struct {
	c   Config // the agent's own copy, with the pod MTU
	cfg ServiceConfig

	installed atomic.Bool
	ready     chan struct{}
	readyOnce sync.Once
}

// NewService returns the install service for c.
func NewService(c *Config, cfg ServiceConfig) *Service {
	own := *c // the caller's config stays as given
	own.podMTU = cfg.PodMTU
	own.policySocket = cfg.PolicySocket
	return &Service{c: own, cfg: cfg, ready: make(chan struct{})}
}

// Ready returns nil once the config is installed.
func (s *Service) Ready() error {
	switch {
	case s.installed.Load():
		return nil
	case s.c.NodeCIDR != nil && s.cfg.PodCIDRs != nil && len(s.cfg.PodCIDRs()) == 0:
		return fmt.Errorf("network config not installed: Node %s has no spec.podCIDRs yet (kube-controller-manager --allocate-node-cidrs)", s.cfg.Node)
	}
	return errors.New("network config not installed yet")
}

// ReadyC is closed when the config is first installed.
func (s *Service) ReadyC() <-chan struct{} { return s.ready }

// Run waits for After, installs, and keeps the node-CIDR config current
// until ctx ends; a failed install is retried with backoff. On return
// with UninstallOnExit it removes the config, so that the runtime reports
// the node's network not ready.
func (s *Service) Run(ctx context.Context) error {
	s.run(ctx)
	if s.c.UninstallOnExit && s.installed.Load() {
		if err := s.c.uninstall(); err != nil {
			return err
		}
		s.cfg.Logger.Info("network config removed", "path", s.c.confPath())
	}
	return nil
}

func (s *Service) run(ctx context.Context) {
	for _, ch := range s.cfg.After {
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
	if s.c.NodeCIDR != nil {
		s.installNodeCIDRs(ctx)
		return
	}
	backoff := 500 * time.Millisecond
	for {
		path, f, err := s.c.apply(s.cfg.Node, nil)
		if err == nil {
			s.markInstalled()
			s.logInstalled(path, f)
			break
		}
		s.cfg.Logger.Error("install failed", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	<-ctx.Done()
}

func (s *Service) markInstalled() {
	s.installed.Store(true)
	s.readyOnce.Do(func() { close(s.ready) })
}

// logInstalled reports the config f written at path, and warns of each
// pod MTU the config sets itself above what the underlay carries.
func (s *Service) logInstalled(path string, f confFile, args ...any) {
	s.cfg.Logger.Info("network config installed", append([]any{"path", path}, args...)...)
	for _, mtu := range f.mtuAbove {
		s.cfg.Logger.Warn("the network config's own pod MTU is larger than the underlay carries once encapsulated: "+
			"large packets between pods of different nodes depend on ICMP fragmentation-needed, and are lost where it is filtered; "+
			"remove mtu from the config to have the agent set it",
			"path", path, "mtu", mtu, "pod_mtu", s.c.podMTU, "mode", s.cfg.Mode)
	}
}

// installNodeCIDRs installs the plugins, then writes the config each time
// the node's podCIDRs change, the first time once they are known: until
// then the node has no config, and its runtime reports the network not
// ready. When the Node is deleted, the last config stays until the Node
// comes back with podCIDRs of its own: removing it would take the node
// out of service while its kubelet registers again.
func (s *Service) installNodeCIDRs(ctx context.Context) {
	var written []byte
	var retry <-chan time.Time
	backoff := 500 * time.Millisecond
	pluginsDone := false
	for {
		if cidrs := s.cfg.PodCIDRs(); len(cidrs) > 0 {
			err := s.installFor(cidrs, &written, &pluginsDone)
			retry = nil
			if err != nil {
				s.cfg.Logger.Error("install failed", "pod_cidrs", cidrs, "err", err, "retry_in", backoff)
				retry = time.After(backoff)
				backoff = min(2*backoff, 5*time.Second)
			} else {
				backoff = 500 * time.Millisecond
			}
		} else if written == nil {
			s.cfg.Logger.Info("waiting for the Node's spec.podCIDRs before installing the network config", "path", s.c.confPath())
		}
		select {
		case <-ctx.Done():
			return
		case <-s.cfg.PodCIDRsChanged:
		case <-retry:
		}
	}
}

// installFor writes the config for cidrs unless it is what was last
// written, installing the plugins first if they are not yet.
func (s *Service) installFor(cidrs []netip.Prefix, written *[]byte, pluginsDone *bool) error {
	conf, err := s.c.conf(s.cfg.Node, cidrs)
	if err != nil {
		return err
	}
	if bytes.Equal(conf.data, *written) {
		return nil
	}
	if !*pluginsDone {
		if err := s.c.installPlugins(); err != nil {
			return err
		}
		*pluginsDone = true
	}
	path, err := s.c.write(conf.data)
	if err != nil {
		return err
	}
	*written = conf.data
	s.markInstalled()
	s.logInstalled(path, conf, "pod_cidrs", cidrs)
	return nil
}
