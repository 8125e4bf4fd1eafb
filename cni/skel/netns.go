package skel

import (
	"errors"
	"io/fs"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/netns"
)

// checkNetNS decides whether a handler may run against CNI_NETNS: it must
// be a network namespace, and not the plugin's own, or a plugin meant to
// configure a container would configure the host.
//
// For DEL a path that is no longer a namespace (it does not exist, or a
// leftover mount point whose namespace was unmounted) is reported as
// gone, and the handler still runs: DEL must succeed when the container's
// network is already torn down.
func checkNetNS(cmd cni.Verb, path string) (gone bool, err error) {
	err = netns.IsNetNS(path)
	switch {
	case err == nil:
	case cmd == cni.VerbDel && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, netns.ErrNotNetNS)):
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, cni.Errorf(cni.CodeUnknownContainer, "CNI_NETNS %s does not exist", path)
	default:
		return false, cni.Errorf(cni.CodeInvalidEnvironment, "CNI_NETNS: %v", err)
	}
	same, err := netns.SameAsCurrent(path)
	if err != nil {
		if cmd == cni.VerbDel && errors.Is(err, fs.ErrNotExist) { // removed just now
			return true, nil
		}
		return false, cni.Errorf(cni.CodeInvalidEnvironment, "CNI_NETNS: %v", err)
	}
	if same {
		return false, cni.Errorf(cni.CodeInvalidEnvironment, "CNI_NETNS %s is the plugin's own network namespace, not a container's", path)
	}
	return false, nil
}
