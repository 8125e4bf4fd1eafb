package main

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/podnet/podnet/netplugin"
	"github.com/podnet/podnet/sandbox"
)

// podEnv is what the sandbox-level commands share: the sandbox records,
// and the cni network plugin behind a PluginManager, its host resolving a
// sandbox ID to the namespace path in the records.
type podEnv struct {
	store   *sandbox.Store
	plugin  *netplugin.CNIPlugin
	manager *netplugin.PluginManager
}

// podEnv prepares the plugin. With requireReady, a plugin whose Status is
// not nil is an error explaining why; tear-down works without it.
func (o *globalOptions) podEnv(network string, requireReady bool) (*podEnv, error) {
	env := &podEnv{store: sandbox.NewStore(o.stateDir)}
	env.plugin = netplugin.NewCNIPlugin(o.confDir, o.binDirs,
		netplugin.WithCacheDir(o.cacheDir), netplugin.WithDefaultNetwork(network),
		netplugin.WithLoopback(netplugin.LoopbackMode(o.loopback)))
	if err := env.plugin.Init(netplugin.InitConfig{Host: netplugin.HostFunc(env.netnsOf)}); err != nil {
		return nil, fmt.Errorf("network plugin %q failed init: %w", netplugin.CNIPluginName, err)
	}
	if err := env.plugin.Status(); err != nil && requireReady {
		env.close()
		def, broken := env.plugin.Networks()
		msg := err.Error()
		if def == nil && network != "" {
			msg = fmt.Sprintf("%s: no network %q in %s", msg, network, o.confDir)
		} else if def == nil {
			msg = fmt.Sprintf("%s: no valid network in %s (podnet install writes one)", msg, o.confDir)
		}
		var reasons []string
		for _, b := range broken {
			reasons = append(reasons, b.Error())
		}
		if len(reasons) > 0 {
			msg += " (broken: " + strings.Join(reasons, "; ") + ")"
		}
		return nil, errors.New(msg)
	}
	manager, err := netplugin.NewPluginManager(env.plugin, nil)
	if err != nil {
		env.close()
		return nil, err
	}
	env.manager = manager
	return env, nil
}

func (e *podEnv) close() {
	if e.plugin != nil {
		_ = e.plugin.Close()
	}
}

// netnsOf finds a sandbox's namespace by its ID. A record that cannot be
// read does not hide the others; but when the sandbox is not among those
// read, the store's error is the answer: the unreadable record may be
// its, and "does not exist" would send the caller the wrong way.
func (e *podEnv) netnsOf(id string) (string, error) {
	all, err := e.store.List()
	for _, sb := range all {
		if sb.ID == id {
			return sb.NetNS, nil
		}
	}
	if err != nil {
		return "", fmt.Errorf("sandbox %q: sandbox records in %s: %w", id, e.store.Dir(), err)
	}
	return "", fmt.Errorf("sandbox %q: %w", id, fs.ErrNotExist)
}
