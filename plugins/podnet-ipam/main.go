package main

import (
	"context"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/cni/skel"
	"github.com/podnet/podnet/ipamcni"
)

func main() {
	(&skel.Plugin{
		Add: func(a *skel.CmdArgs) (*cni.Result, error) {
			var res *cni.Result
			err := with(a, func(ctx context.Context, p *ipamcni.IPAM) (err error) {
				// The endpoint has no MAC or host interface here: the main
				// plugin that wires the pod is not podnet.
				res, err = p.AddAttachment(ctx, ipamcni.PodInterface{ContainerID: a.ContainerID, IfName: a.IfName, Args: a.ArgsPairs})
				return err
			})
			return res, err
		},
		Del: func(a *skel.CmdArgs) error {
			// Only what a release needs: a DEL must succeed with a
			// configuration edited since the ADD, and on a store that
			// was never created.
			req, err := ipamcni.ParseReleaseRequest(a.StdinData)
			if err != nil {
				return err
			}
			return ipamcni.Release(context.Background(), req, ipamcni.PodInterface{ContainerID: a.ContainerID, IfName: a.IfName, Args: a.ArgsPairs})
		},
		Check: func(a *skel.CmdArgs) error {
			return with(a, func(ctx context.Context, p *ipamcni.IPAM) error {
				return p.Check(ctx, a.ContainerID, a.NetConf.PrevResult)
			})
		},
		Status: func(a *skel.CmdArgs) error {
			return with(a, func(ctx context.Context, p *ipamcni.IPAM) error { return p.Status(ctx) })
		},
		GC: func(a *skel.CmdArgs) error {
			return with(a, func(ctx context.Context, p *ipamcni.IPAM) error {
				_, err := p.GC(ctx, a.NetConf.ValidAttachments)
				return err
			})
		},
		About: "podnet-ipam: host-affine block IPAM on etcd or bbolt",
	}).Main()
}

// with parses the request, opens the store, runs fn and closes the store.
func with(a *skel.CmdArgs, fn func(context.Context, *ipamcni.IPAM) error) error {
	req, err := ipamcni.ParseRequest(a.StdinData, a.ArgsPairs)
	if err != nil {
		return err
	}
	ctx := context.Background()
	p, err := ipamcni.Open(ctx, req)
	if err != nil {
		return err
	}
	defer p.Close()
	return fn(ctx, p)
}
