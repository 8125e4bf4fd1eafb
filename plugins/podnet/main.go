package main

import (
	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/cni/skel"
)

func main() { plugin().Main() }

func plugin() *skel.Plugin {
	return &skel.Plugin{
		Add:      cmdAdd,
		Del:      cmdDel,
		Check:    cmdCheck,
		Status:   cmdStatus,
		GC:       cmdGC,
		Versions: cni.SupportedVersions,
		About:    "podnet plugin (routed and bridge pod networking)",
	}
}
