package main

import (
	"context"
	"encoding/json"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/cni/skel"
	"github.com/podnet/podnet/ipamcni"
)

// inProcessIPAM is podnet-ipam run inside this plugin. Unless the config
// says otherwise, routed pods get host-length addresses (/32, /128) and
// bridged pods the pool's length with a per-node gateway.
type inProcessIPAM struct {
	req  *ipamcni.Request
	args *skel.CmdArgs
	// committed reports, once, the end of Add's commit: the store Add
	// allocated in syncs and closes in the background while ADD wires
	// the pod (ipamcni.OpenPipelined), and Finish waits for it.
	committed chan error
}

func newInProcessIPAM(c *conf, args *skel.CmdArgs) (ipamClient, error) {
	req, err := ipamcni.ParseRequest(args.StdinData, args.ArgsPairs)
	if err != nil {
		return nil, err
	}
	if !hasResultPrefix(args.StdinData) {
		req.Config.ResultPrefix = "host"
		if c.Mode == modeBridge {
			req.Config.ResultPrefix = "pool"
		}
	}
	return &inProcessIPAM{req: req, args: args}, nil
}

// hasResultPrefix reports whether the ipam config sets resultPrefix itself.
func hasResultPrefix(stdin []byte) bool {
	var c struct {
		IPAM struct {
			ResultPrefix string `json:"resultPrefix"`
		} `json:"ipam"`
	}
	return json.Unmarshal(stdin, &c) == nil && c.IPAM.ResultPrefix != ""
}

func (p *inProcessIPAM) with(ctx context.Context, fn func(*ipamcni.IPAM) error) error {
	ip, err := ipamcni.Open(ctx, p.req)
	if err != nil {
		return err
	}
	defer ip.Close()
	return fn(ip)
}

// attachment describes the pod interface for its workload endpoint,
// recorded with the addresses in the allocation's one block write.
func (p *inProcessIPAM) attachment() ipamcni.PodInterface {
	return ipamcni.PodInterface{ContainerID: p.args.ContainerID, IfName: p.args.IfName, Args: p.args.ArgsPairs}
}

func (p *inProcessIPAM) Add(ctx context.Context) (*cni.Result, error) {
	ip, err := ipamcni.OpenPipelined(ctx, p.req)
	if err != nil {
		return nil, err
	}
	res, err := ip.AddAttachment(ctx, p.attachment())
	// The store is let go as soon as the commit is on disk, not when
	// this ADD ends: a bbolt store stays locked while it is open, and
	// every other ADD and DEL of the node waits for that lock, which
	// would otherwise cover this ADD's veth, routes and policy
	// handshake too.
	p.committed = make(chan error, 1)
	go func() {
		serr := ip.Sync(ctx)
		if cerr := ip.Close(); serr == nil {
			serr = cerr // Close repeats a failed commit; one report is enough
		}
		p.committed <- serr
	}()
	return res, err
}

// Finish waits for Add's commit and the store's release.
func (p *inProcessIPAM) Finish(context.Context) error {
	if p.committed == nil {
		return nil
	}
	err := <-p.committed
	p.committed = nil
	return err
}

// Del releases the addresses and the endpoint, unless a newer sandbox of
// the pod has taken the endpoint over.
func (p *inProcessIPAM) Del(ctx context.Context) error {
	return ipamcni.Release(ctx, p.req, p.attachment())
}

func (p *inProcessIPAM) Check(ctx context.Context) error {
	return p.with(ctx, func(ip *ipamcni.IPAM) error {
		return ip.Check(ctx, p.args.ContainerID, p.args.NetConf.PrevResult)
	})
}

func (p *inProcessIPAM) Status(ctx context.Context) error {
	return p.with(ctx, func(ip *ipamcni.IPAM) error { return ip.Status(ctx) })
}

func (p *inProcessIPAM) GC(ctx context.Context) error {
	return p.with(ctx, func(ip *ipamcni.IPAM) error {
		_, err := ip.GC(ctx, p.args.NetConf.ValidAttachments)
		return err
	})
}
