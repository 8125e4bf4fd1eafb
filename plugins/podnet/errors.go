package main

import (
	"errors"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/portmap/portmapcni"
)

// cniError is err as the plugin reports it. dataplane and portmap report
// kinds of failure, not CNI codes; they get their codes here, at the
// plugin's boundary (every verb's error passes through it, see plugin).
// An error that holds a *cni.Error already (the plugin's own, the IPAM's)
// keeps it, as skel would report it. A kind's error becomes a *cni.Error
// with the kind's code and the failure's own message.
func cniError(err error) error {
	var ce *cni.Error
	var de *dataplane.Error
	switch {
	case err == nil, errors.As(err, &ce):
		return err
	case errors.As(err, &de):
		switch de.Kind {
		case dataplane.KindNotBridge:
			// The bridge is the configuration's, and so is the fault.
			return confErr("bridge", "%s", de.Msg)
		case dataplane.KindConflict:
			return cni.Errorf(cni.CodeAddressConflict, "%s", de.Msg)
		}
		return cni.Errorf(cni.CodeInternal, "%s", de.Msg)
	}
	return portmapcni.Error(err)
}
