package portmapcni

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/portmap"
)

func TestContainer(t *testing.T) {
	r := &cni.Result{
		Interfaces: []*cni.Interface{{Name: "veth1"}, {Name: "eth0", Sandbox: "/run/netns/x"}},
		IPs: []*cni.IPConfig{
			{Interface: cni.IntPtr(0), Address: netip.MustParsePrefix("169.254.1.1/32")}, // host side: not the pod's
			{Interface: cni.IntPtr(1), Address: netip.MustParsePrefix("10.1.0.2/24")},
			{Interface: cni.IntPtr(1), Address: netip.MustParsePrefix("10.1.0.9/24")},
			{Address: netip.MustParsePrefix("fd00::2/64")},
		},
	}
	c := Container(r)
	if c.V4 != netip.MustParseAddr("10.1.0.2") || c.V6 != netip.MustParseAddr("fd00::2") {
		t.Fatalf("%v %v", c.V4, c.V6)
	}
	if h := c.HostInterfaces; len(h) != 1 || h[0] != "veth1" {
		t.Fatalf("host interfaces %v", h)
	}
	if Container(nil) != nil {
		t.Fatal("a container without prevResult")
	}
}

// TestError pins the codes the plugins report for portmap's failures.
func TestError(t *testing.T) {
	for _, tt := range []struct {
		kind portmap.Kind
		code cni.Code
	}{
		{portmap.KindMalformed, cni.CodeDecodingFailure},
		{portmap.KindInvalid, cni.CodeInvalidNetworkConfig},
		{portmap.KindConflict, cni.CodeAddressConflict},
		{portmap.KindIO, cni.CodeIOFailure},
		{portmap.KindMissing, cni.CodeInternal},
	} {
		pe := &portmap.Error{Kind: tt.kind, Msg: "what failed"}
		err := Error(fmt.Errorf("wrapped: %w", pe))
		var ce *cni.Error
		if !errors.As(err, &ce) || ce.Code != tt.code || ce.Msg != "what failed" {
			t.Errorf("%v: %#v, want code %d with the failure's own message", tt.kind, err, tt.code)
		}
	}
	// The plugin's own CNI error wins; an error of no kind is left alone.
	own := cni.Errorf(cni.CodeTryAgainLater, "later")
	if err := Error(errors.Join(&portmap.Error{Kind: portmap.KindIO}, own)); err == nil || cni.CodeOf(err) != cni.CodeTryAgainLater {
		t.Errorf("with a CNI error: %v", err)
	}
	plain := errors.New("plain")
	if err := Error(plain); err != plain {
		t.Errorf("plain: %v", err)
	}
	if Error(nil) != nil {
		t.Error("nil")
	}
}
