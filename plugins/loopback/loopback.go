package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/cni/skel"
	"github.com/podnet/podnet/internal/loif"
	"github.com/podnet/podnet/netns"
)

const loName = loif.Name

func plugin() *skel.Plugin {
	return &skel.Plugin{
		Add:      cmdAdd,
		Del:      cmdDel,
		Check:    cmdCheck,
		Versions: cni.SupportedVersions,
		About:    "podnet loopback plugin",
	}
}

func cmdAdd(args *skel.CmdArgs) (*cni.Result, error) {
	var addrs []netip.Prefix
	err := inNetNS(args.Netns, func() error {
		if err := loif.SetUp(true); err != nil {
			return err
		}
		var err error
		addrs, err = loopbackAddrs()
		return err
	})
	if err != nil {
		return nil, err
	}
	// In a chain, lo is not the pod's interface: hand the earlier result
	// on unchanged, as the reference plugin does.
	if args.NetConf.PrevResult != nil {
		return args.NetConf.PrevResult, nil
	}
	return result(args.Netns, addrs), nil
}

// result describes lo with the first address of each family it has (the
// kernel gives it 127.0.0.1/8, and ::1/128 unless IPv6 is disabled).
func result(sandbox string, addrs []netip.Prefix) *cni.Result {
	r := &cni.Result{
		CNIVersion: cni.CurrentVersion,
		Interfaces: []*cni.Interface{{Name: loName, Mac: "00:00:00:00:00:00", Sandbox: sandbox}},
	}
	var have4, have6 bool
	for _, a := range addrs {
		if (a.Addr().Is4() && have4) || (a.Addr().Is6() && have6) {
			continue
		}
		have4, have6 = have4 || a.Addr().Is4(), have6 || a.Addr().Is6()
		r.IPs = append(r.IPs, &cni.IPConfig{Interface: cni.IntPtr(0), Address: a})
	}
	return r
}

// loopbackAddrs lists lo's addresses, v4 first, and refuses a lo that
// carries a non-loopback address: something else has been configuring it.
func loopbackAddrs() ([]netip.Prefix, error) {
	addrs, err := loif.Addrs()
	if err != nil {
		return nil, err
	}
	for _, p := range addrs {
		if !p.Addr().IsLoopback() {
			return nil, fmt.Errorf("%s has a non-loopback address %s", loName, p)
		}
	}
	return addrs, nil
}

func cmdDel(args *skel.CmdArgs) error {
	if args.Netns == "" || args.NetnsGone {
		return nil
	}
	ns, err := netns.Open(args.Netns)
	// The namespace may have gone since skel looked: nothing left to undo.
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, netns.ErrNotNetNS) {
		return nil
	}
	if err != nil {
		return err
	}
	defer ns.Close()
	return ns.Do(func() error { return loif.SetUp(false) })
}

func cmdCheck(args *skel.CmdArgs) error {
	return inNetNS(args.Netns, func() error {
		up, err := loif.IsUp()
		if err != nil {
			return err
		}
		if !up {
			return fmt.Errorf("%s in %s is down", loName, args.Netns)
		}
		return nil
	})
}

// inNetNS runs fn in the namespace at path. A namespace that vanished
// after skel checked it gets the code skel would have given it; errors
// from fn are left alone.
func inNetNS(path string, fn func() error) error {
	ns, err := netns.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return cni.Errorf(cni.CodeUnknownContainer, "CNI_NETNS %s does not exist", path)
	}
	if err != nil {
		return cni.Errorf(cni.CodeInvalidEnvironment, "CNI_NETNS: %v", err)
	}
	defer ns.Close()
	return ns.Do(fn)
}
