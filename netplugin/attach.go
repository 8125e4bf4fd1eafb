package netplugin

import (
	"context"
	"errors"
	"fmt"

	"github.com/podnet/podnet/cni"
)

// LoopbackNetworkName is the name under which the loopback attachment is
// cached.
const LoopbackNetworkName = "cni-loopback"

const loopbackIfName = "lo"

// attacher is the attach/detach path the cni plugin and kubenet share:
// they differ only in where the default network comes from.
type attacher struct {
	runtime   *cni.Runtime
	loNetwork *cni.NetworkConfigList
	// loInProcess: lo is brought up by this process rather than by an
	// exec of the loopback plugin (see LoopbackInProcess).
	loInProcess bool
}

func newAttacher(rt *cni.Runtime, lo LoopbackMode) *attacher {
	loNet, err := cni.ParseNetworkConfigList([]byte(`{"cniVersion":"1.0.0","name":"`+LoopbackNetworkName+`","plugins":[{"type":"loopback"}]}`), "built-in loopback network")
	if err != nil {
		panic(err) // a constant; cannot fail
	}
	return &attacher{runtime: rt, loNetwork: loNet, loInProcess: lo == LoopbackInProcess}
}

// addLoopback attaches the pod to the loopback network: lo up in its
// namespace, by the loopback plugin or in process.
func (p *attacher) addLoopback(ctx context.Context, loConf *cni.RuntimeConf) error {
	if p.loInProcess {
		return loopbackUp(loConf.NetNS)
	}
	_, err := p.runtime.AddNetworkList(ctx, p.loNetwork, loConf)
	return err
}

// delLoopback undoes addLoopback after a failed set-up. In process there
// is nothing to undo: lo up in a namespace that is about to go is
// harmless, and the loopback plugin's DEL only takes it down again.
func (p *attacher) delLoopback(ctx context.Context, loConf *cni.RuntimeConf) error {
	if p.loInProcess {
		return nil
	}
	return p.runtime.DelNetworkList(ctx, p.loNetwork, loConf)
}

// Runtime returns the CNI runtime the plugin uses.
func (p *attacher) Runtime() *cni.Runtime { return p.runtime }

// setUp attaches a pod to the loopback network and to the default
// network. The two touch different interfaces and nothing of each other,
// so they run at the same time: a pod's set-up costs the slower of the two
// chains, not their sum. When either fails, the other is removed again, so
// a failed set-up leaves nothing behind.
func (p *attacher) setUp(ctx context.Context, list *cni.NetworkConfigList, host Host, podCIDR string, pod PodRef, sandboxID string, opts *PodOptions) (*PodNetworkStatus, error) {
	netnsPath, err := netNSPath(host, sandboxID)
	if err != nil {
		return nil, err
	}
	loConf := buildRuntimeConf(pod, sandboxID, netnsPath, loopbackIfName, "", nil)
	loDone := make(chan error, 1)
	go func() { loDone <- p.addLoopback(ctx, loConf) }()
	conf := buildRuntimeConf(pod, sandboxID, netnsPath, DefaultInterfaceName, podCIDR, opts)
	res, err := p.runtime.AddNetworkList(ctx, list, conf)
	loErr := <-loDone
	cleanup := context.WithoutCancel(ctx)
	switch {
	case err != nil && loErr == nil:
		if delErr := p.delLoopback(cleanup, loConf); delErr != nil {
			err = errors.Join(err, fmt.Errorf("removing the loopback attachment: %w", delErr))
		}
		return nil, err
	case err != nil:
		// Both failed; each chain rolled itself back.
		return nil, errors.Join(err, fmt.Errorf("adding pod to the loopback network: %w", loErr))
	case loErr != nil:
		if delErr := p.runtime.DelNetworkList(cleanup, list, conf); delErr != nil {
			loErr = errors.Join(loErr, fmt.Errorf("removing the %s attachment: %w", list.Name, delErr))
		}
		return nil, fmt.Errorf("adding pod to the loopback network: %w", loErr)
	}
	return statusFromResult(list.Name, DefaultInterfaceName, res), nil
}

func netNSPath(host Host, sandboxID string) (string, error) {
	if host == nil {
		return "", errors.New("network plugin is not initialised: no host")
	}
	path, err := host.NetNSPath(sandboxID)
	if err != nil {
		return "", fmt.Errorf("cannot get the network namespace of sandbox %q: %w", sandboxID, err)
	}
	return path, nil
}

// tearDown deletes every cached attachment of the sandbox with the
// configuration it was added with, so a config that changed or vanished
// since does not leak the pod's resources. It succeeds when the network
// namespace is already gone. Without a cache entry it falls back to
// today's default network, as kubelet does.
func (p *attacher) tearDown(ctx context.Context, list *cni.NetworkConfigList, host Host, podCIDR string, pod PodRef, sandboxID string) error {
	netnsPath := ""
	if host != nil {
		// A missing namespace is not fatal on tear-down.
		netnsPath, _ = host.NetNSPath(sandboxID)
	}
	atts, err := p.runtime.CachedAttachmentsOf("", sandboxID)
	if err != nil {
		return err
	}
	type del struct {
		list *cni.NetworkConfigList
		rt   *cni.RuntimeConf
	}
	var defaults, los []del
	var errs []error
	for _, a := range atts {
		lo := a.Network == LoopbackNetworkName
		cached, err := a.CachedNetworkConfigList()
		if err != nil {
			// The entry cannot say how it was added; today's config
			// for the same network is the best remaining guess.
			cached = p.currentNetwork(a.Network, list)
		}
		if cached == nil {
			errs = append(errs, fmt.Errorf("attachment %s: %w", a.Path, err))
			continue
		}
		ns := a.NetNS
		if netnsPath != "" {
			ns = netnsPath
		}
		rt := buildRuntimeConf(pod, sandboxID, ns, a.IfName, podCIDR, nil)
		rt.Args, rt.CapabilityArgs = a.Args, a.CapabilityArgs
		if lo {
			los = append(los, del{cached, rt})
		} else {
			defaults = append(defaults, del{cached, rt})
		}
	}
	// Without a cache entry, fall back to today's config, as kubelet does.
	if len(defaults) == 0 && list != nil {
		defaults = append(defaults, del{list, buildRuntimeConf(pod, sandboxID, netnsPath, DefaultInterfaceName, podCIDR, nil)})
	}
	// Without one, the loopback plugin's DEL is sent all the same, as
	// kubelet does; in process there is nothing to take down (lo goes
	// with the namespace). Entries cached before a switch to in process
	// are still deleted above, by the plugin that made them.
	if len(los) == 0 && !p.loInProcess {
		los = append(los, del{p.loNetwork, buildRuntimeConf(pod, sandboxID, netnsPath, loopbackIfName, "", nil)})
	}
	// The loopback attachment goes at the same time as the others: they
	// share nothing, and tear-down costs the slower chain, not the sum.
	loErrs := make(chan error, 1)
	go func() {
		var errs []error
		for _, d := range los {
			if err := p.runtime.DelNetworkList(ctx, d.list, d.rt); err != nil {
				errs = append(errs, err)
			}
		}
		loErrs <- errors.Join(errs...)
	}()
	for _, d := range defaults {
		if err := p.runtime.DelNetworkList(ctx, d.list, d.rt); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, <-loErrs)
	return errors.Join(errs...)
}

func (p *attacher) currentNetwork(name string, def *cni.NetworkConfigList) *cni.NetworkConfigList {
	switch {
	case name == LoopbackNetworkName:
		return p.loNetwork
	case def != nil && def.Name == name:
		return def
	}
	return nil
}

// status returns the pod's addresses from the cached result of its
// default-network attachment, confirmed on the live interface inside the
// pod's namespace.
func (p *attacher) status(list *cni.NetworkConfigList, host Host, sandboxID string) (*PodNetworkStatus, error) {
	netnsPath, err := netNSPath(host, sandboxID)
	if err != nil {
		return nil, err
	}
	atts, err := p.runtime.CachedAttachmentsOf("", sandboxID)
	if err != nil {
		return nil, err
	}
	var att *cni.CachedAttachment
	for _, a := range atts {
		if a.Network == LoopbackNetworkName || a.Result == nil {
			continue
		}
		if att == nil || (list != nil && a.Network == list.Name) {
			att = a
		}
	}
	if att == nil {
		return nil, cni.Errorf(cni.CodeUnknownContainer, "no cached network attachment for sandbox %q", sandboxID)
	}
	st := statusFromResult(att.Network, att.IfName, att.Result)
	if err := verifyLiveAddresses(netnsPath, att.IfName, st.IPs); err != nil {
		return nil, err
	}
	return st, nil
}

// gc deletes every cached attachment whose sandbox is not in
// validSandboxIDs, network by network, and sends plugins of 1.1.0 networks
// the GC verb with the valid attachments.
func (p *attacher) gc(ctx context.Context, list *cni.NetworkConfigList, validSandboxIDs []string) error {
	all, err := p.runtime.CachedAttachments("", "")
	if err != nil {
		return err
	}
	networks := map[string]*cni.NetworkConfigList{p.loNetwork.Name: p.loNetwork}
	if list != nil {
		networks[list.Name] = list
	}
	for _, a := range all {
		if _, ok := networks[a.Network]; ok {
			continue
		}
		if cached, err := a.CachedNetworkConfigList(); err == nil {
			networks[a.Network] = cached
		}
	}
	var errs []error
	for name, n := range networks {
		ifName := DefaultInterfaceName
		if name == LoopbackNetworkName {
			ifName = loopbackIfName
		}
		valid := make([]cni.GCAttachment, 0, len(validSandboxIDs))
		for _, id := range validSandboxIDs {
			valid = append(valid, cni.GCAttachment{ContainerID: id, IfName: ifName})
		}
		if err := p.runtime.GCNetworkList(ctx, n, valid); err != nil {
			errs = append(errs, fmt.Errorf("network %q: %w", name, err))
		}
	}
	return errors.Join(errs...)
}
