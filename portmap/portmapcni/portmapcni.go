// Package portmapcni is what a CNI plugin needs to run package portmap:
// the container a mapping leads to, read from prevResult, and the CNI
// error codes of portmap's kinds of failure. portmap itself knows nothing
// of CNI; podnet and podnet-portmap both publish host ports through it.
package portmapcni

import (
	"errors"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/portmap"
)

// Container reads from prevResult the first IPv4 and the first IPv6
// address of the container (an address on an interface inside a sandbox,
// or one tied to no interface) and the interfaces outside any sandbox:
// the host side of the container's link, where traffic to the container
// leaves the host. It is nil when prev is.
func Container(prev *cni.Result) *portmap.Container {
	if prev == nil {
		return nil
	}
	c := &portmap.Container{}
	for _, ip := range prev.IPs {
		if ip.Interface != nil {
			i := *ip.Interface
			if i < 0 || i >= len(prev.Interfaces) || prev.Interfaces[i].Sandbox == "" {
				continue
			}
		}
		a := ip.Address.Addr().Unmap()
		switch {
		case a.Is4() && !c.V4.IsValid():
			c.V4 = a
		case a.Is6() && !c.V6.IsValid():
			c.V6 = a
		}
	}
	for _, i := range prev.Interfaces {
		if i.Sandbox == "" && i.Name != "" {
			c.HostInterfaces = append(c.HostInterfaces, i.Name)
		}
	}
	return c
}

// Error is err as a plugin reports it: a *portmap.Error in err's chain
// becomes a *cni.Error with its kind's code and its own message (as skel
// reports a *cni.Error found in a chain). err is returned as it is when
// it holds a *cni.Error already (the plugin's own decision) or no
// *portmap.Error.
func Error(err error) error {
	var ce *cni.Error
	var pe *portmap.Error
	if err == nil || errors.As(err, &ce) || !errors.As(err, &pe) {
		return err
	}
	return cni.Errorf(Code(pe.Kind), "%s", pe.Msg)
}

// Code is the CNI code of one of portmap's kinds of failure.
func Code(kind portmap.Kind) cni.Code {
	switch kind {
	case portmap.KindMalformed:
		return cni.CodeDecodingFailure
	case portmap.KindInvalid:
		return cni.CodeInvalidNetworkConfig
	case portmap.KindConflict:
		return cni.CodeAddressConflict
	case portmap.KindIO:
		return cni.CodeIOFailure
	}
	// KindMissing: no code in the specification fits "not as ADD left
	// it"; podnet's CHECK reports CodeInternal with what differs.
	return cni.CodeInternal
}
