package main

import (
	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/cni/skel"
)

func main() { plugin().Main() }

// plugin is the CNI boundary: every verb's error gets its CNI code here
// (cniError).
func plugin() *skel.Plugin {
	return &skel.Plugin{
		Add: func(args *skel.CmdArgs) (*cni.Result, error) {
			res, err := cmdAdd(args)
			return res, cniError(err)
		},
		Del:      func(args *skel.CmdArgs) error { return cniError(cmdDel(args)) },
		Check:    func(args *skel.CmdArgs) error { return cniError(cmdCheck(args)) },
		Status:   func(args *skel.CmdArgs) error { return cniError(cmdStatus(args)) },
		GC:       func(args *skel.CmdArgs) error { return cniError(cmdGC(args)) },
		Versions: cni.SupportedVersions,
		About:    "podnet plugin (routed and bridge pod networking)",
	}
}
