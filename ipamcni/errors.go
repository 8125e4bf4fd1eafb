package ipamcni

import (
	"errors"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/ipam"
)

// kindCode is the CNI code of each kind of IPAM failure. This is the one
// place where the IPAM's errors become CNI codes; the ipam package itself
// knows nothing of CNI.
func kindCode(k ipam.Kind) cni.Code {
	switch k {
	case ipam.KindInvalid:
		return cni.CodeInvalidNetworkConfig // 7
	case ipam.KindInUse:
		return cni.CodeAddressConflict // 105
	case ipam.KindExhausted:
		return cni.CodeNoFreeAddress // 106
	case ipam.KindUnavailable:
		return cni.CodeTryAgainLater // 11: the runtime retries
	case ipam.KindNotFound:
		return cni.CodeUnknownContainer // 3
	case ipam.KindWriteFailed:
		return cni.CodeIOFailure // 5
	default:
		return cni.CodeInternal // 100
	}
}

// CodeOf returns the CNI code a runtime gets for err: its own when it
// carries one, else that of its IPAM kind; 0 for nil and for an error
// that has neither.
func CodeOf(err error) cni.Code {
	if code := cni.CodeOf(err); code != 0 {
		return code
	}
	var ie *ipam.Error
	if errors.As(err, &ie) {
		return kindCode(ie.Kind)
	}
	return 0
}

// cniError turns an error of the allocator or of a store into the
// *cni.Error the runtime gets. A store error that reached no allocator
// (opening, syncing or closing the store) is code 11 when the store was
// unavailable, so the runtime retries instead of failing the pod for
// good, 7 when it refused the configured credentials (the configuration
// must change first), and an I/O failure (5) otherwise.
func cniError(err error) error {
	if err == nil || cni.CodeOf(err) != 0 {
		return err // without allocating: this runs on every success
	}
	var ie *ipam.Error
	switch {
	case errors.As(err, &ie):
		return &cni.Error{Code: kindCode(ie.Kind), Msg: err.Error()}
	case errors.Is(err, ipam.ErrDenied):
		return cni.Errorf(kindCode(ipam.KindInvalid), "podnet-ipam: %v", err)
	case errors.Is(err, ipam.ErrUnavailable):
		return cni.Errorf(cni.CodeTryAgainLater, "podnet-ipam: store unavailable: %v", err)
	default:
		return cni.Errorf(cni.CodeIOFailure, "podnet-ipam: %v", err)
	}
}
