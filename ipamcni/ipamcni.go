package ipamcni

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/ipam"
)

// IPAM serves one request against an open store.
type IPAM struct {
	req   *Request
	store ipam.Store
	alloc *ipam.Allocator
}

// Open opens the store for req.
func Open(ctx context.Context, req *Request) (*IPAM, error) {
	return openIPAM(ctx, req, oneOperation)
}

// OpenPipelined is Open for an ADD that has more to do with the
// addresses than report them, as the podnet plugin does (veth, routes,
// nftables). With a bbolt store the allocation returns once it is
// applied, and its commit (two fsyncs) runs while the caller wires the
// pod; nobody else can take the addresses meanwhile, since the file stays
// locked until Close. The caller must not report the addresses before
// Sync has succeeded, and must Close before anything else opens the
// store in this process (undoing a failed ADD does). With etcd a write is
// durable when it returns and Sync has nothing to wait for.
func OpenPipelined(ctx context.Context, req *Request) (*IPAM, error) {
	return openIPAM(ctx, req, oneOperationPipelined)
}

func openIPAM(ctx context.Context, req *Request, use storeUse) (*IPAM, error) {
	st, err := openStore(ctx, &req.Config, use)
	if err != nil {
		return nil, cniError(err)
	}
	cfg := AllocatorConfig(&req.Config)
	cfg.StrictAffinity, cfg.MaxBlocksPerHost = req.Config.StrictAffinity, req.Config.MaxBlocksPerHost
	if use == oneRelease && remoteStore(req) {
		// A DEL that cannot reach the store leaves a record for the
		// agent instead of failing: waiting long for the store only
		// slows the node's teardown (a drain after the agent is gone
		// would wait the full retry for every sandbox).
		cfg.UnavailableTimeout = releaseUnavailableTimeout
	}
	return &IPAM{req: req, store: st, alloc: ipam.New(st, cfg)}, nil
}

// AllocatorConfig is the allocator configuration every user of the store
// c names shares: its key prefix, and for a bbolt store (one node, whose
// plugins all run this version) the migration of a layout v1 it finds
// (ipam.Config.MigrateV1), done under the file's lock by a plugin.
func AllocatorConfig(c *Config) ipam.Config {
	cfg := ipam.Config{MigrateV1: strings.HasPrefix(c.Store, "bolt:")}
	if c.Prefix != "" {
		cfg.Keys = ipam.Keys{Prefix: c.Prefix}
	}
	return cfg
}

// Close releases the store. It reports a pipelined commit that failed.
func (p *IPAM) Close() error { return cniError(p.store.Close()) }

// Sync waits until this IPAM's writes are durable; see OpenPipelined.
func (p *IPAM) Sync(ctx context.Context) error {
	if s, ok := p.store.(interface{ Sync(context.Context) error }); ok {
		return cniError(s.Sync(ctx))
	}
	return nil
}

// ensurePools creates the configured pools the store does not have yet.
// Pools the store has are left as they are, invalid ones too (an
// allocation naming one says what is wrong with it): after the first
// node, the store is the truth and the config only a seed.
func (p *IPAM) ensurePools(ctx context.Context) error {
	have, invalid, err := p.alloc.Pools(ctx)
	if err != nil {
		return err
	}
	for _, want := range p.req.Pools {
		if slices.ContainsFunc(have, func(h ipam.Pool) bool { return h.Name == want.Name }) ||
			slices.ContainsFunc(invalid, func(h *ipam.InvalidPoolError) bool { return h.Name == want.Name }) {
			continue
		}
		if err := p.alloc.PutPool(ctx, want); err != nil {
			return err
		}
	}
	return nil
}

// families counts the pool families the config names: one address each.
func (p *IPAM) families() (v4, v6 []string) {
	for _, pool := range p.req.Pools {
		if pool.CIDR.Addr().Is4() {
			v4 = append(v4, pool.Name)
		} else {
			v6 = append(v6, pool.Name)
		}
	}
	return v4, v6
}

// AddAttachment gives the attachment its addresses (the same ones again
// for a repeated ADD) and returns the result. When at.IfName is set it
// also records the attachment's workload endpoint, in the addresses'
// attributes, so an ADD in steady state is still one store write.
//
// The configured pools are created only when the store turns out not to
// have one (the first ADD of a cluster): checking them up front would read
// the pools a second time on every ADD.
func (p *IPAM) AddAttachment(ctx context.Context, at PodInterface) (*cni.Result, error) {
	var res *cni.Result
	err := p.nodeLocked(ctx, func() error {
		var err error
		res, err = p.addAttachment(ctx, at)
		var missing *ipam.NoSuchPoolError
		if errors.As(err, &missing) {
			if err := p.ensurePools(ctx); err != nil {
				return err
			}
			res, err = p.addAttachment(ctx, at)
		}
		return err
	})
	return res, cniError(err)
}

func (p *IPAM) addAttachment(ctx context.Context, at PodInterface) (*cni.Result, error) {
	containerID := at.ContainerID
	handle := Handle(p.req.Network, containerID)
	if remoteStore(p.req) {
		// A container ID used again after a DEL that left a release
		// for the agent: the handle's addresses are this ADD's now
		// (AutoAssign returns them), and the agent must not free them.
		switch err := ClearReleaseRecord(releaseDir(p.req), handle); {
		case errors.Is(err, ErrReleasing):
			return nil, cni.Errorf(cni.CodeTryAgainLater, "podnet-ipam: %s: %v", handle, err)
		case err != nil:
			return nil, cni.Errorf(cni.CodeIOFailure, "podnet-ipam: release record of %s: %v", handle, err)
		}
	}
	ep := p.endpoint(at)
	attrs := allocationAttrs(ep, p.req, at)
	var addrs []netip.Prefix
	if len(p.req.IPs) > 0 {
		// Requested addresses are looked up by address, not pool name:
		// make sure the pools exist first (a rare path, not the hot one).
		if err := p.ensurePools(ctx); err != nil {
			return nil, err
		}
		for _, ip := range p.req.IPs {
			got, err := p.alloc.AssignIP(ctx, ipam.AssignIPArgs{Addr: ip, Handle: handle, Node: p.req.Config.Node, Attrs: attrs, Endpoint: ep})
			if err != nil {
				return nil, err
			}
			addrs = append(addrs, got)
		}
	} else {
		v4, v6 := p.families()
		as, err := p.alloc.AutoAssign(ctx, ipam.AutoAssignArgs{
			Handle: handle, Node: p.req.Config.Node, Num4: min(1, len(v4)), Num6: min(1, len(v6)),
			Attrs: attrs, Pools4: v4, Pools6: v6, Ranges: p.req.Ranges, Endpoint: ep,
		})
		if err != nil {
			return nil, err
		}
		addrs = append(as.IPv4, as.IPv6...)
	}
	return p.result(ctx, addrs)
}

// allocationAttrs are what an allocation records besides its handle and
// node, in its block, where they are read and rewritten by every
// allocation and release in the block: with an endpoint, nothing more
// (the allocator adds the endpoint's ID, which names the node, namespace,
// pod and interface, and its creation time; the handle names network and
// container); without one, the container, network and pod, for people
// reading the store. Measured with a block of 60 allocations, decoding
// and encoding it took 378 us with every attribute repeated and 162 us
// with the endpoint ID alone.
func allocationAttrs(ep *ipam.EndpointID, req *Request, at PodInterface) map[string]string {
	if ep != nil {
		return nil
	}
	attrs := map[string]string{"containerID": at.ContainerID, "node": req.Config.Node, "network": req.Network}
	for _, kv := range at.Args {
		switch kv[0] {
		case "K8S_POD_NAMESPACE":
			attrs["namespace"] = kv[1]
		case "K8S_POD_NAME":
			attrs["pod"] = kv[1]
		}
	}
	return attrs
}

// result writes the addresses with the prefix length the caller wants; a
// "pool" result also names a gateway: one address per node and family,
// reserved under the handle <network>.gateway.<node> (idempotent, so every
// pod of the node gets the same one).
func (p *IPAM) result(ctx context.Context, addrs []netip.Prefix) (*cni.Result, error) {
	res := &cni.Result{CNIVersion: cni.CurrentVersion, Routes: p.req.Config.Routes}
	var gw ipam.Assignment
	if p.req.Config.ResultPrefix == "pool" {
		v4, v6 := p.families()
		var err error
		gw, err = p.alloc.AutoAssign(ctx, ipam.AutoAssignArgs{
			Handle: p.req.Network + ".gateway." + p.req.Config.Node, Node: p.req.Config.Node,
			Num4: min(1, len(v4)), Num6: min(1, len(v6)), Pools4: v4, Pools6: v6,
			Attrs: map[string]string{"gateway": "true", "node": p.req.Config.Node},
		})
		if err != nil {
			return nil, err
		}
	}
	for _, a := range addrs {
		ip := &cni.IPConfig{Address: netip.PrefixFrom(a.Addr(), a.Addr().BitLen())}
		if p.req.Config.ResultPrefix == "pool" {
			for _, pool := range p.req.Pools {
				if pool.CIDR.Contains(a.Addr()) {
					ip.Address = netip.PrefixFrom(a.Addr(), pool.CIDR.Bits())
				}
			}
			for _, g := range append(gw.IPv4, gw.IPv6...) {
				if g.Addr().Is4() == a.Addr().Is4() {
					ip.Gateway = g.Addr()
				}
			}
		}
		res.IPs = append(res.IPs, ip)
	}
	return res, nil
}

// Check verifies that the store still gives the attachment the addresses
// of prevResult.
func (p *IPAM) Check(ctx context.Context, containerID string, prev *cni.Result) error {
	have, err := p.alloc.IPsByHandle(ctx, p.req.Config.Node, Handle(p.req.Network, containerID))
	if err != nil {
		return cniError(err)
	}
	held := map[netip.Addr]bool{}
	for _, h := range have {
		held[h.Addr()] = true
	}
	if prev == nil {
		if len(held) == 0 {
			return cni.Errorf(cni.CodeUnknownContainer, "podnet-ipam: handle %q holds no address", Handle(p.req.Network, containerID))
		}
		return nil
	}
	var missing []string
	for _, ip := range prev.IPs {
		if !held[ip.Address.Addr()] {
			missing = append(missing, ip.Address.Addr().String())
		}
	}
	if len(missing) > 0 {
		return cni.Errorf(cni.CodeUnknownContainer, "podnet-ipam: handle %q no longer holds %s", Handle(p.req.Network, containerID), strings.Join(missing, ", "))
	}
	return nil
}

// Status says whether ADD can succeed: the store answers and a pool can
// hand out addresses.
func (p *IPAM) Status(ctx context.Context) error {
	// Invalid pools are not counted: they serve nothing, an ADD that
	// names one says so, and a failed STATUS would take the node's
	// network out of service for every pool.
	pools, _, err := p.alloc.Pools(ctx)
	if err != nil {
		return cni.Errorf(cni.CodePluginNotAvailable, "podnet-ipam: store %s: %v", p.req.Config.Store, err)
	}
	if len(pools) == 0 {
		// The pools are created at the first ADD, from the config.
		return nil
	}
	for _, pool := range pools {
		if !pool.Disabled {
			return nil
		}
	}
	return cni.Errorf(cni.CodePluginNotAvailable, "podnet-ipam: every pool is disabled")
}

// GC releases the addresses this node holds for attachments of this
// network that are not in valid. Other networks' handles, other nodes'
// addresses and per-node gateways are never touched.
func (p *IPAM) GC(ctx context.Context, valid []cni.GCAttachment) ([]netip.Addr, error) {
	keep := map[string]bool{p.req.Network + ".gateway." + p.req.Config.Node: true}
	for _, v := range valid {
		keep[Handle(p.req.Network, v.ContainerID)] = true
	}
	node, prefix := p.req.Config.Node, p.req.Network+"."
	rep, err := p.alloc.CheckNode(ctx, node, ipam.CheckOptions{Live: func(n, h string) bool {
		return n != node || !strings.HasPrefix(h, prefix) || keep[h]
	}})
	if err != nil {
		return nil, cniError(err)
	}
	var released []netip.Addr
	var errs []error
	done := map[string]bool{}
	for _, l := range rep.Leaked {
		if done[l.Handle] {
			continue
		}
		done[l.Handle] = true
		if err := p.alloc.ReleaseByHandle(ctx, node, l.Handle); err != nil {
			errs = append(errs, fmt.Errorf("release %s: %w", l.Handle, err))
			continue
		}
		for _, o := range rep.Leaked {
			if o.Handle == l.Handle {
				released = append(released, o.Addr)
			}
		}
	}
	return released, cniError(errors.Join(errs...))
}
