package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/portmap"
)

// TestCNIError pins the codes podnet reports for the failures dataplane
// and portmap report in their own terms.
func TestCNIError(t *testing.T) {
	for _, tt := range []struct {
		err  error
		code cni.Code
		msg  string
	}{
		{&dataplane.Error{Kind: dataplane.KindConflict, Msg: "duplicate IP"}, cni.CodeAddressConflict, "duplicate IP"},
		{&dataplane.Error{Kind: dataplane.KindNotBridge, Msg: "pn0 exists and is a dummy, not a bridge"}, cni.CodeInvalidNetworkConfig,
			"config: bridge: pn0 exists and is a dummy, not a bridge"},
		{&portmap.Error{Kind: portmap.KindConflict, Msg: "host port taken"}, cni.CodeAddressConflict, "host port taken"},
		{&portmap.Error{Kind: portmap.KindIO, Msg: "no socket"}, cni.CodeIOFailure, "no socket"},
		// A CNI error (the plugin's own) wins over a kind.
		{errors.Join(errors.New("plain"), cni.Errorf(cni.CodeUnknownContainer, "gone"), &portmap.Error{Kind: portmap.KindIO}), cni.CodeUnknownContainer, "gone"},
	} {
		err := cniError(fmt.Errorf("context: %w", tt.err))
		var ce *cni.Error
		if !errors.As(err, &ce) || ce.Code != tt.code || ce.Msg != tt.msg {
			t.Errorf("%v: %v (code %d), want code %d and %q", tt.err, err, cni.CodeOf(err), tt.code, tt.msg)
		}
	}
	if err := withUndo(&dataplane.Error{Kind: dataplane.KindConflict, Msg: "taken"}, errors.New("veth stuck")); cni.CodeOf(err) != cni.CodeAddressConflict ||
		!strings.Contains(err.Error(), "rollback incomplete: veth stuck") {
		t.Errorf("with undo: %v (code %d)", err, cni.CodeOf(err))
	}
}
