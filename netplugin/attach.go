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

// networkSource is where a plugin's default network comes from: the conf
// dir (CNIPlugin) or the node's pod CIDR (Kubenet). Everything else, the
// attach and detach path, is the attacher's, which asks its source once
// at the start of each operation.
type networkSource interface {
	current() netSnapshot
}

// netSnapshot is what an operation needs from its source, read at once so
// that a concurrent config change or event cannot mix two states.
type netSnapshot struct {
	network *cni.NetworkConfigList // the default network; nil when there is none
	// ipRanges is the pod CIDR passed as the ipRanges capability; empty
	// when the network carries its subnet itself.
	ipRanges string
	host     Host
	notReady error // Status's answer: set-up refuses to run while it is set
}

// podRequest is one operation on one pod, with what the source said when
// it began.
type podRequest struct {
	netSnapshot
	pod       PodRef
	sandboxID string
	opts      *PodOptions // set-up only
}

// loopbackConf is the runtime configuration of the pod's loopback
// attachment: the pod's identity, nothing it asked for.
func (r *podRequest) loopbackConf(netnsPath string) *cni.RuntimeConf {
	return buildRuntimeConf(r.pod, r.sandboxID, netnsPath, loopbackIfName)
}

// networkConf is the runtime configuration of the pod's attachment to the
// default network: its identity, its options and the ipRanges.
func (r *podRequest) networkConf(netnsPath string) *cni.RuntimeConf {
	conf := buildRuntimeConf(r.pod, r.sandboxID, netnsPath, DefaultInterfaceName)
	conf.CapabilityArgs = capabilityArgs(r.opts, r.ipRanges)
	return conf
}

// attacher is the attach and detach path the cni plugin and kubenet share;
// it implements NetworkPlugin's pod methods and GarbageCollector for both.
type attacher struct {
	source    networkSource
	runtime   *cni.Runtime
	loNetwork *cni.NetworkConfigList
	// loInProcess: lo is brought up by this process rather than by an
	// exec of the loopback plugin (see LoopbackInProcess).
	loInProcess bool
}

func newAttacher(src networkSource, rt *cni.Runtime, lo LoopbackMode) *attacher {
	return &attacher{source: src, runtime: rt, loNetwork: loopbackNetwork(), loInProcess: lo == LoopbackInProcess}
}

// loopbackNetwork is the built-in network of every pod's lo.
func loopbackNetwork() *cni.NetworkConfigList {
	lo, err := cni.ParseNetworkConfigList([]byte(`{"cniVersion":"1.0.0","name":"`+LoopbackNetworkName+`","plugins":[{"type":"loopback"}]}`), "built-in loopback network")
	if err != nil {
		panic(err) // a constant; cannot fail
	}
	return lo
}

// SetUpPod implements NetworkPlugin.
func (p *attacher) SetUpPod(ctx context.Context, pod PodRef, sandboxID string, opts *PodOptions) (*PodNetworkStatus, error) {
	s := p.source.current()
	if s.notReady != nil {
		return nil, s.notReady
	}
	return p.setUp(ctx, podRequest{netSnapshot: s, pod: pod, sandboxID: sandboxID, opts: opts})
}

// TearDownPod implements NetworkPlugin. It runs whether or not the plugin
// is ready: what was set up must be removable.
func (p *attacher) TearDownPod(ctx context.Context, pod PodRef, sandboxID string) error {
	return p.tearDown(ctx, podRequest{netSnapshot: p.source.current(), pod: pod, sandboxID: sandboxID})
}

// GetPodNetworkStatus implements NetworkPlugin.
func (p *attacher) GetPodNetworkStatus(ctx context.Context, pod PodRef, sandboxID string) (*PodNetworkStatus, error) {
	return p.status(ctx, podRequest{netSnapshot: p.source.current(), pod: pod, sandboxID: sandboxID})
}

// GC implements GarbageCollector.
func (p *attacher) GC(ctx context.Context, validSandboxIDs []string) error {
	return p.gc(ctx, p.source.current().network, validSandboxIDs)
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
func (p *attacher) setUp(ctx context.Context, req podRequest) (*PodNetworkStatus, error) {
	netnsPath, err := netNSPath(req.host, req.sandboxID)
	if err != nil {
		return nil, err
	}
	list := req.network
	loConf := req.loopbackConf(netnsPath)
	loDone := make(chan error, 1)
	go func() { loDone <- p.addLoopback(ctx, loConf) }()
	conf := req.networkConf(netnsPath)
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
func (p *attacher) tearDown(ctx context.Context, req podRequest) error {
	netnsPath := ""
	if req.host != nil {
		// A missing namespace is not fatal on tear-down.
		netnsPath, _ = req.host.NetNSPath(req.sandboxID)
	}
	plan, err := p.planTearDown(req, netnsPath)
	if err != nil {
		return err
	}
	// The loopback attachment goes at the same time as the others: they
	// share nothing, and tear-down costs the slower chain, not the sum.
	loErr := make(chan error, 1)
	go func() { loErr <- p.delAll(ctx, plan.loopback) }()
	err = p.delAll(ctx, plan.networks)
	return errors.Join(append(plan.errs, err, <-loErr)...)
}

// del is the DEL of one attachment.
type del struct {
	list *cni.NetworkConfigList
	rt   *cni.RuntimeConf
}

// tearDownPlan is what a tear-down deletes: the loopback attachments
// apart, since they go concurrently, and the cached entries that could
// not be turned into a DEL.
type tearDownPlan struct {
	networks, loopback []del
	errs               []error
}

func (p *attacher) planTearDown(req podRequest, netnsPath string) (tearDownPlan, error) {
	var plan tearDownPlan
	atts, err := p.runtime.CachedAttachmentsOf("", req.sandboxID)
	if err != nil {
		return plan, err
	}
	for _, a := range atts {
		d, err := p.cachedDel(req, a, netnsPath)
		switch {
		case err != nil:
			plan.errs = append(plan.errs, err)
		case a.Network == LoopbackNetworkName:
			plan.loopback = append(plan.loopback, d)
		default:
			plan.networks = append(plan.networks, d)
		}
	}
	// Without a cache entry, fall back to today's config, as kubelet does.
	if len(plan.networks) == 0 && req.network != nil {
		plan.networks = append(plan.networks, del{req.network, req.networkConf(netnsPath)})
	}
	// Without one, the loopback plugin's DEL is sent all the same, as
	// kubelet does; in process there is nothing to take down (lo goes
	// with the namespace). Entries cached before a switch to in process
	// are still deleted above, by the plugin that made them.
	if len(plan.loopback) == 0 && !p.loInProcess {
		plan.loopback = append(plan.loopback, del{p.loNetwork, req.loopbackConf(netnsPath)})
	}
	return plan, nil
}

// cachedDel is the DEL of a cached attachment: with the configuration
// and arguments it was added with, in the sandbox's namespace as the host
// knows it now (else as cached).
func (p *attacher) cachedDel(req podRequest, a *cni.CachedAttachment, netnsPath string) (del, error) {
	cached, err := a.CachedNetworkConfigList()
	if err != nil {
		// The entry cannot say how it was added; today's config
		// for the same network is the best remaining guess.
		cached = p.currentNetwork(a.Network, req.network)
	}
	if cached == nil {
		return del{}, fmt.Errorf("attachment %s: %w", a.Path, err)
	}
	ns := a.NetNS
	if netnsPath != "" {
		ns = netnsPath
	}
	rt := buildRuntimeConf(req.pod, req.sandboxID, ns, a.IfName)
	rt.Args, rt.CapabilityArgs = a.Args, a.CapabilityArgs
	return del{cached, rt}, nil
}

// delAll deletes dels one after the other, all of them whatever fails.
func (p *attacher) delAll(ctx context.Context, dels []del) error {
	var errs []error
	for _, d := range dels {
		if err := p.runtime.DelNetworkList(ctx, d.list, d.rt); err != nil {
			errs = append(errs, err)
		}
	}
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
// pod's namespace. Neither step blocks for long, so ctx is checked before
// each rather than passed down.
func (p *attacher) status(ctx context.Context, req podRequest) (*PodNetworkStatus, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	netnsPath, err := netNSPath(req.host, req.sandboxID)
	if err != nil {
		return nil, err
	}
	atts, err := p.runtime.CachedAttachmentsOf("", req.sandboxID)
	if err != nil {
		return nil, err
	}
	var att *cni.CachedAttachment
	for _, a := range atts {
		if a.Network == LoopbackNetworkName || a.Result == nil {
			continue
		}
		if att == nil || (req.network != nil && a.Network == req.network.Name) {
			att = a
		}
	}
	if att == nil {
		return nil, cni.Errorf(cni.CodeUnknownContainer, "no cached network attachment for sandbox %q", req.sandboxID)
	}
	st := statusFromResult(att.Network, att.IfName, att.Result)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
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
