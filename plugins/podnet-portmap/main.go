package main

import (
	"fmt"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/cni/skel"
	"github.com/podnet/podnet/dataplane/tag"
	"github.com/podnet/podnet/portmap"
	"github.com/podnet/podnet/portmap/portmapcni"
)

func main() { plugin().Main() }

// plugin is the CNI boundary: portmap's kinds of failure get their CNI
// codes here, once, for every verb.
func plugin() *skel.Plugin {
	return &skel.Plugin{
		Add: func(args *skel.CmdArgs) (*cni.Result, error) {
			res, err := cmdAdd(args)
			return res, portmapcni.Error(err)
		},
		Del:      func(args *skel.CmdArgs) error { return portmapcni.Error(cmdDel(args)) },
		Check:    func(args *skel.CmdArgs) error { return portmapcni.Error(cmdCheck(args)) },
		GC:       func(args *skel.CmdArgs) error { return portmapcni.Error(cmdGC(args)) },
		Versions: cni.SupportedVersions,
		About:    "podnet port-mapping plugin",
	}
}

// lockPath is the lock file; tests leave it as it is.
var lockPath = portmap.DefaultLockPath

func owner(args *skel.CmdArgs) tag.Owner {
	return tag.Owner{Network: args.NetConf.Name, ContainerID: args.ContainerID, IfName: args.IfName}
}

func request(args *skel.CmdArgs) (*portmap.Request, error) {
	c, err := portmap.ParseConfig(args.StdinData)
	if err != nil {
		return nil, err
	}
	return &portmap.Request{
		Owner:     owner(args),
		Config:    c,
		Container: portmapcni.Container(args.NetConf.PrevResult),
		LockPath:  lockPath,
	}, nil
}

func cmdAdd(args *skel.CmdArgs) (*cni.Result, error) {
	r, err := request(args)
	if err != nil {
		return nil, err
	}
	if err := portmap.Add(r); err != nil {
		return nil, err
	}
	if prev := args.NetConf.PrevResult; prev != nil {
		return prev, nil
	}
	return &cni.Result{CNIVersion: args.NetConf.CNIVersion}, nil
}

func cmdDel(args *skel.CmdArgs) error {
	r, err := request(args)
	if err != nil {
		// DEL must clean up whatever it is given: without readable
		// mappings, look for the attachment's elements everywhere.
		fmt.Fprintf(args.Stderr, "podnet-portmap: DEL: %v; removing every element of %s\n", err, args.ContainerID)
		r = &portmap.Request{
			Owner:    owner(args),
			Config:   &portmap.Config{},
			LockPath: lockPath,
			Sweep:    true,
		}
	}
	if !r.Config.MappingsGiven {
		// A DEL without portMappings (a runtime or CLI that passes no
		// capability arguments on DEL, such as podnet pod del without
		// CAP_ARGS) tells nothing about what ADD published. Elements
		// left behind would DNAT the host port to an address the IPAM
		// later gives another pod, so find them by their owner.
		r.Sweep = true
	}
	return portmap.Del(r)
}

func cmdCheck(args *skel.CmdArgs) error {
	r, err := request(args)
	if err != nil {
		return err
	}
	return portmap.Check(r)
}

func cmdGC(args *skel.CmdArgs) error {
	valid := make([]tag.Owner, 0, len(args.NetConf.ValidAttachments))
	for _, a := range args.NetConf.ValidAttachments {
		valid = append(valid, tag.Owner{Network: args.NetConf.Name, ContainerID: a.ContainerID, IfName: a.IfName})
	}
	return portmap.GC(args.NetConf.Name, valid, lockPath)
}
