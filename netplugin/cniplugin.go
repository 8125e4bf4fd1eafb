package netplugin

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/podnet/podnet/cni"
)

// ErrCNIConfigUninitialized is Status's answer until a valid default
// network exists, in kubelet's words.
var ErrCNIConfigUninitialized = errors.New("cni config uninitialized")

// ErrNoPodCIDR is Status's answer when the default network asks for
// ipRanges and the node's pod CIDR is not known yet.
var ErrNoPodCIDR = errors.New("cni config needs ipRanges but no PodCIDR set")

// CNIPlugin is the "cni" network plugin: every pod gets the loopback
// network, then the default network, the first valid network in the conf
// dir in file name order.
type CNIPlugin struct {
	*attacher
	confDir string
	log     *slog.Logger
	resync  time.Duration
	want    string // the default network's name; empty: the first one

	mu             sync.RWMutex
	defaultNetwork *cni.NetworkConfigList
	broken         []*cni.LoadError
	podCIDR        string
	host           Host

	watcher *confWatcher
}

// ProbeOption configures the plugins ProbeNetworkPlugins returns.
type ProbeOption func(*probeConfig)

type probeConfig struct {
	cacheDir   string
	resync     time.Duration
	logger     *slog.Logger
	runtimeOpt []cni.Option
	kubenetDir string
	network    string
	loopback   LoopbackMode
}

// WithDefaultNetwork makes the network called name the default one
// instead of the first in file name order.
func WithDefaultNetwork(name string) ProbeOption { return func(c *probeConfig) { c.network = name } }

// WithCacheDir sets the CNI result cache directory.
func WithCacheDir(dir string) ProbeOption { return func(c *probeConfig) { c.cacheDir = dir } }

// WithResyncInterval sets how often the conf dir is re-read even without a
// change notification (a safety net for missed events; default 1m).
func WithResyncInterval(d time.Duration) ProbeOption { return func(c *probeConfig) { c.resync = d } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) ProbeOption { return func(c *probeConfig) { c.logger = l } }

// WithRuntimeOptions passes options to the cni.Runtime the plugins use.
func WithRuntimeOptions(opts ...cni.Option) ProbeOption {
	return func(c *probeConfig) { c.runtimeOpt = append(c.runtimeOpt, opts...) }
}

// WithKubenetDataDir sets where kubenet's IPAM keeps its state.
func WithKubenetDataDir(dir string) ProbeOption { return func(c *probeConfig) { c.kubenetDir = dir } }

func newProbeConfig(opts []ProbeOption) *probeConfig {
	c := &probeConfig{cacheDir: cni.DefaultCacheDir, resync: time.Minute, logger: slog.Default(), kubenetDir: "/var/lib/podnet/kubenet", loopback: LoopbackPlugin}
	for _, o := range opts {
		o(c)
	}
	return c
}

func (c *probeConfig) newRuntime(binDirs []string) *cni.Runtime {
	return cni.NewRuntime(binDirs, append([]cni.Option{cni.WithCacheDir(c.cacheDir)}, c.runtimeOpt...)...)
}

// ProbeNetworkPlugins returns the cni plugin and kubenet, as kubelet's
// probe does. Empty arguments mean the defaults /etc/cni/net.d and
// /opt/cni/bin. The cni plugin has read the conf dir once when this
// returns; Init starts watching it.
func ProbeNetworkPlugins(confDir string, binDirs []string, opts ...ProbeOption) []NetworkPlugin {
	return []NetworkPlugin{NewCNIPlugin(confDir, binDirs, opts...), NewKubenet(binDirs, opts...)}
}

// orDefaultBinDirs is binDirs, or DefaultBinDir when there are none.
func orDefaultBinDirs(binDirs []string) []string {
	if len(binDirs) == 0 {
		return []string{DefaultBinDir}
	}
	return binDirs
}

// SelectPlugin returns the plugin called name from plugins, initialised
// with cfg.
func SelectPlugin(plugins []NetworkPlugin, name string, cfg InitConfig) (NetworkPlugin, error) {
	for _, p := range plugins {
		if p.Name() == name {
			if err := p.Init(cfg); err != nil {
				return nil, fmt.Errorf("network plugin %q failed init: %w", name, err)
			}
			return p, nil
		}
	}
	return nil, fmt.Errorf("network plugin %q not found", name)
}

// NewCNIPlugin returns the cni plugin for the networks in confDir and
// the plugins in binDirs (empty: DefaultConfDir, DefaultBinDir), for a
// caller that knows it wants this plugin. It has read the conf dir once
// when it returns; Init starts watching it.
func NewCNIPlugin(confDir string, binDirs []string, opts ...ProbeOption) *CNIPlugin {
	if confDir == "" {
		confDir = DefaultConfDir
	}
	c := newProbeConfig(opts)
	p := &CNIPlugin{confDir: confDir, log: c.logger, resync: c.resync, want: c.network}
	p.attacher = newAttacher(p, c.newRuntime(orDefaultBinDirs(binDirs)), c.loopback)
	p.syncNetworkConfig()
	return p
}

// Name implements NetworkPlugin.
func (p *CNIPlugin) Name() string { return CNIPluginName }

// Capabilities implements NetworkPlugin.
func (p *CNIPlugin) Capabilities() []Capability { return nil }

// Init implements NetworkPlugin: it records the host and starts watching
// the conf dir.
func (p *CNIPlugin) Init(cfg InitConfig) error {
	p.mu.Lock()
	p.host = cfg.Host
	p.mu.Unlock()
	w, err := startConfWatcher(p.confDir, p.resync, p.syncNetworkConfig, p.log)
	if err != nil {
		return err
	}
	p.watcher = w
	return nil
}

// Close implements NetworkPlugin.
func (p *CNIPlugin) Close() error {
	if p.watcher != nil {
		p.watcher.stop()
	}
	return nil
}

// syncNetworkConfig re-reads the conf dir and makes its first valid
// network the default one. Broken files are logged and kept for Networks.
func (p *CNIPlugin) syncNetworkConfig() {
	dc, err := cni.LoadDir(p.confDir)
	var def *cni.NetworkConfigList
	var broken []*cni.LoadError
	if err != nil {
		broken = []*cni.LoadError{{Path: p.confDir, Err: err}}
	} else {
		broken = dc.Broken
		switch {
		case p.want != "":
			def = dc.Network(p.want)
		case len(dc.Networks) > 0:
			def = dc.Networks[0]
		}
	}
	p.mu.Lock()
	changed := (p.defaultNetwork == nil) != (def == nil) || (def != nil && (p.defaultNetwork.Path != def.Path || string(p.defaultNetwork.Bytes) != string(def.Bytes)))
	p.defaultNetwork, p.broken = def, broken
	p.mu.Unlock()
	if changed {
		if def != nil {
			p.log.Info("default network", "network", def.Name, "file", def.Path)
		} else {
			p.log.Warn("no valid network config", "dir", p.confDir, "broken", len(broken))
		}
	}
	for _, b := range broken {
		p.log.Debug("unusable network config", "file", b.Path, "err", b.Err)
	}
}

// Networks returns the default network (nil if none) and the files that
// could not be loaded, as of the last sync.
func (p *CNIPlugin) Networks() (*cni.NetworkConfigList, []*cni.LoadError) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.defaultNetwork, p.broken
}

// Sync re-reads the conf dir now.
func (p *CNIPlugin) Sync() { p.syncNetworkConfig() }

// Event implements NetworkPlugin.
func (p *CNIPlugin) Event(name string, details map[string]any) {
	if name != EventPodCIDRChange {
		return
	}
	cidr, ok := details[PodCIDRKey].(string)
	if !ok || cidr == "" {
		p.log.Warn("pod-cidr-change event without a pod CIDR", "details", details)
		return
	}
	p.mu.Lock()
	if p.podCIDR != cidr {
		p.log.Info("pod CIDR set", "cidr", cidr)
	}
	p.podCIDR = cidr
	p.mu.Unlock()
}

// Status implements NetworkPlugin.
func (p *CNIPlugin) Status() error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.statusLocked()
}

func (p *CNIPlugin) statusLocked() error {
	if p.defaultNetwork == nil {
		return ErrCNIConfigUninitialized
	}
	if needsIPRanges(p.defaultNetwork) && p.podCIDR == "" {
		return ErrNoPodCIDR
	}
	return nil
}

func needsIPRanges(list *cni.NetworkConfigList) bool {
	for _, pl := range list.Plugins {
		if pl.Capabilities["ipRanges"] {
			return true
		}
	}
	return false
}

// current implements networkSource.
func (p *CNIPlugin) current() netSnapshot {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return netSnapshot{network: p.defaultNetwork, ipRanges: p.podCIDR, host: p.host, notReady: p.statusLocked()}
}
