package ipamcni

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/ipam"
)

// TestErrorCodes: each kind of IPAM failure gets its CNI code here, and
// store errors that reached no allocator get 11 or 5.
func TestErrorCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want cni.Code
	}{
		{&ipam.Error{Kind: ipam.KindInvalid, Msg: "bad"}, cni.CodeInvalidNetworkConfig},
		{&ipam.Error{Kind: ipam.KindInUse, Msg: "taken"}, cni.CodeAddressConflict},
		{&ipam.Error{Kind: ipam.KindExhausted, Msg: "full"}, cni.CodeNoFreeAddress},
		{&ipam.Error{Kind: ipam.KindUnavailable, Msg: "down"}, cni.CodeTryAgainLater},
		{&ipam.Error{Kind: ipam.KindNotFound, Msg: "none"}, cni.CodeUnknownContainer},
		{&ipam.Error{Kind: ipam.KindWriteFailed, Msg: "disk"}, cni.CodeIOFailure},
		{&ipam.Error{Kind: ipam.KindInternal, Msg: "bug"}, cni.CodeInternal},
		{fmt.Errorf("release h: %w", &ipam.Error{Kind: ipam.KindInUse, Msg: "taken"}), cni.CodeAddressConflict},
		{&ipam.NoSuchPoolError{Name: "p"}, cni.CodeInvalidNetworkConfig},
		{cni.Errorf(cni.CodeDecodingFailure, "own code"), cni.CodeDecodingFailure},
		{fmt.Errorf("open x: %w", ipam.ErrUnavailable), cni.CodeTryAgainLater},
		{fmt.Errorf("commit: %w", ipam.ErrWrite), cni.CodeIOFailure},
		{fmt.Errorf("GET ipamblocks/b: 403 Forbidden: %w", ipam.ErrDenied), cni.CodeInvalidNetworkConfig},
		{errors.New("anything else"), cni.CodeIOFailure},
	} {
		got := cniError(tc.err)
		var ce *cni.Error
		if !errors.As(got, &ce) || ce.Code != tc.want || !strings.Contains(ce.Msg, strings.TrimPrefix(tc.err.Error(), "podnet-ipam: ")) {
			t.Errorf("cniError(%v) = %#v, want code %d with the message", tc.err, got, tc.want)
		}
	}
	if cniError(nil) != nil || CodeOf(nil) != 0 || CodeOf(errors.New("not ipam")) != 0 {
		t.Error("nil or a foreign error got a code")
	}
}

// TestPoolExhausted: an ADD that finds no free address is code 106 naming
// the pool, not 100 (a bug).
func TestPoolExhausted(t *testing.T) {
	db := filepath.Join(t.TempDir(), "ipam.db")
	stdin := []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"net1","type":"podnet","ipam":{"type":"podnet-ipam","store":"bolt:%s","node":"n1",
		"pools":[{"name":"tiny","cidr":"10.107.0.0/30","blockSize":30}]}}`, db))
	ctx := context.Background()
	use(t, stdin, nil, func(p *IPAM) {
		for i := range 4 {
			if _, err := p.AddAttachment(ctx, PodInterface{ContainerID: fmt.Sprint("c", i)}); err != nil {
				t.Fatal(err)
			}
		}
		_, err := p.AddAttachment(ctx, PodInterface{ContainerID: "c4"})
		if cni.CodeOf(err) != cni.CodeNoFreeAddress || !strings.Contains(err.Error(), `pools "tiny"`) {
			t.Fatalf("ADD with the pool full: code %d: %v", cni.CodeOf(err), err)
		}
	})
}
