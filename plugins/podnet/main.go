package main

import (
	"context"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/cni/skel"
)

func main() { plugin().Main() }

// plugin is the CNI boundary: each verb runs under verbContext, and its
// error gets its CNI code here (cniError).
func plugin() *skel.Plugin {
	return &skel.Plugin{
		Add: func(args *skel.CmdArgs) (*cni.Result, error) {
			res, err := cmdAdd(verbContext(args), args)
			return res, cniError(err)
		},
		Del:      verb(cmdDel),
		Check:    verb(cmdCheck),
		Status:   verb(cmdStatus),
		GC:       verb(cmdGC),
		Versions: cni.SupportedVersions,
		About:    "podnet plugin (routed and bridge pod networking)",
	}
}

func verb(fn func(context.Context, *skel.CmdArgs) error) func(*skel.CmdArgs) error {
	return func(args *skel.CmdArgs) error { return cniError(fn(verbContext(args), args)) }
}

// verbContext is the context a verb's IPAM work runs under. CNI gives a
// plugin no deadline (a runtime that gives up ends it by signal), and
// skel.CmdArgs carries no context: when skel has one for the handlers,
// it is returned here.
func verbContext(*skel.CmdArgs) context.Context { return context.Background() }
