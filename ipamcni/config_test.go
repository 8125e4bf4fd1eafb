package ipamcni

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/ipam"
)

func rangesConf(ranges string) []byte {
	return fmt.Appendf(nil, `{"cniVersion":"1.1.0","name":"net1","type":"podnet",
		"ipam":{"type":"podnet-ipam","node":"n1","pools":[{"cidr":"10.105.0.0/16"}]},
		"runtimeConfig":{"ipRanges":%s}}`, ranges)
}

func TestIPRanges(t *testing.T) {
	for _, tc := range []struct {
		name, ranges string
		want         []ipam.Range // nil: an error naming wantErr
		wantErr      string
	}{
		{"subnet only", `[[{"subnet":"10.105.1.0/24"}]]`,
			[]ipam.Range{{Subnet: netip.MustParsePrefix("10.105.1.0/24")}}, ""},
		{"start and end, subnet masked", `[[{"subnet":"10.105.1.7/24","rangeStart":"10.105.1.10","rangeEnd":"10.105.1.20"}]]`,
			[]ipam.Range{{Subnet: netip.MustParsePrefix("10.105.1.0/24"), Start: netip.MustParseAddr("10.105.1.10"), End: netip.MustParseAddr("10.105.1.20")}}, ""},
		{"end only", `[[{"subnet":"10.105.1.0/24","rangeEnd":"10.105.1.20"}]]`,
			[]ipam.Range{{Subnet: netip.MustParsePrefix("10.105.1.0/24"), End: netip.MustParseAddr("10.105.1.20")}}, ""},
		{"bad subnet", `[[{"subnet":"10.105.1.0/33"}]]`, nil, "runtimeConfig.ipRanges[0][0].subnet"},
		{"start outside", `[[{"subnet":"10.105.1.0/24"}],[{"subnet":"10.105.2.0/24","rangeStart":"10.105.3.1"}]]`, nil, `runtimeConfig.ipRanges[1][0].rangeStart "10.105.3.1"`},
		{"end not an address", `[[{"subnet":"10.105.1.0/24","rangeEnd":"x"}]]`, nil, `runtimeConfig.ipRanges[0][0].rangeEnd "x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseRequest(rangesConf(tc.ranges), nil)
			if tc.want == nil {
				if cni.CodeOf(err) != cni.CodeInvalidNetworkConfig || !strings.Contains(fmt.Sprint(err), tc.wantErr) {
					t.Fatalf("got %v, want code %d naming %s", err, cni.CodeInvalidNetworkConfig, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(r.Ranges) != fmt.Sprint(tc.want) {
				t.Errorf("ranges %v, want %v", r.Ranges, tc.want)
			}
		})
	}
}

// TestIPRangesBothBoundsBadNamesStart: with rangeStart and rangeEnd both
// bad, the error names rangeStart on every parse (it once depended on map
// iteration order, so one parse proves nothing).
func TestIPRangesBothBoundsBadNamesStart(t *testing.T) {
	stdin := rangesConf(`[[{"subnet":"10.105.1.0/24","rangeStart":"10.9.9.9","rangeEnd":"not-an-ip"}]]`)
	const want = `runtimeConfig.ipRanges[0][0].rangeStart "10.9.9.9": not an address in 10.105.1.0/24`
	for i := range 200 {
		_, err := ParseRequest(stdin, nil)
		if cni.CodeOf(err) != cni.CodeInvalidNetworkConfig || !strings.Contains(fmt.Sprint(err), want) {
			t.Fatalf("parse %d: got %v, want code %d naming %s", i, err, cni.CodeInvalidNetworkConfig, want)
		}
	}
}
