package policy

import (
	"math/rand/v2"
	"net/netip"
	"reflect"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
)

func TestCompileIPBlock(t *testing.T) {
	tests := []struct {
		cidr    string
		except  []string
		key     string
		want    []string
		wantErr bool
	}{
		{cidr: "10.0.0.0/24", key: "10.0.0.0/24", want: []string{"10.0.0.0/24"}},
		{cidr: "10.0.0.7/24", key: "10.0.0.0/24", want: []string{"10.0.0.0/24"}},
		{cidr: "10.0.0.0/24", except: []string{"10.0.0.0/26"}, key: "10.0.0.0/24 except 10.0.0.0/26",
			want: []string{"10.0.0.64/26", "10.0.0.128/25"}},
		{cidr: "10.0.0.0/29", except: []string{"10.0.0.5/32"}, key: "10.0.0.0/29 except 10.0.0.5/32",
			want: []string{"10.0.0.0/30", "10.0.0.4/32", "10.0.0.6/31"}},
		// excepts out of order, duplicated, nested, outside, of the other family: one canonical key
		{cidr: "10.0.0.0/24", except: []string{"10.0.0.128/25", "10.0.0.0/26", "10.0.0.128/25", "10.0.0.130/32", "11.0.0.0/8", "fd00::/8"},
			key:  "10.0.0.0/24 except 10.0.0.0/26 10.0.0.128/25 10.0.0.130/32",
			want: []string{"10.0.0.64/26"}},
		{cidr: "10.0.0.0/24", except: []string{"10.0.0.0/16"}, key: "10.0.0.0/24 except 10.0.0.0/16", want: nil},
		{cidr: "0.0.0.0/0", except: []string{"128.0.0.0/1"}, key: "0.0.0.0/0 except 128.0.0.0/1", want: []string{"0.0.0.0/1"}},
		{cidr: "fd00::/64", except: []string{"fd00::/65"}, key: "fd00::/64 except fd00::/65", want: []string{"fd00::8000:0:0:0/65"}},
		{cidr: "::/0", except: []string{"::/1"}, key: "::/0 except ::/1", want: []string{"8000::/1"}},
		{cidr: "10.0.0.0", wantErr: true},
		{cidr: "10.0.0.0/8", except: []string{"junk"}, wantErr: true},
	}
	for _, tt := range tests {
		b, err := compileIPBlock(&networkingv1.IPBlock{CIDR: tt.cidr, Except: tt.except})
		if (err != nil) != tt.wantErr {
			t.Errorf("%s except %v: error %v, want error %v", tt.cidr, tt.except, err, tt.wantErr)
			continue
		}
		if tt.wantErr {
			continue
		}
		var got []string
		for _, p := range b.prefixes {
			got = append(got, p.String())
		}
		if b.key != tt.key || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s except %v: key %q prefixes %v, want %q %v", tt.cidr, tt.except, b.key, got, tt.key, tt.want)
		}
	}
}

// TestSubtractPrefixesExact checks every address of a /22 against random
// excepts: in the prefixes exactly when in the CIDR and in no except, with
// the prefixes disjoint and in order.
func TestSubtractPrefixesExact(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	cidr := netip.MustParsePrefix("10.0.0.0/22")
	for range 200 {
		var excepts []netip.Prefix
		for range r.IntN(5) {
			a := netip.AddrFrom4([4]byte{10, 0, byte(r.IntN(5)), byte(r.IntN(256))})
			excepts = append(excepts, netip.PrefixFrom(a, 21+r.IntN(12)).Masked())
		}
		got := subtractPrefixes(nil, cidr, excepts)
		for i := 1; i < len(got); i++ {
			if got[i-1].Overlaps(got[i]) || got[i-1].Addr().Compare(got[i].Addr()) >= 0 {
				t.Fatalf("excepts %v: prefixes %v not disjoint and ordered", excepts, got)
			}
		}
		for a := netip.MustParseAddr("10.0.0.0"); a.Compare(netip.MustParseAddr("10.0.5.0")) < 0; a = a.Next() {
			want := cidr.Contains(a)
			for _, e := range excepts {
				want = want && !e.Contains(a)
			}
			if inPrefixes(got, a) != want {
				t.Fatalf("excepts %v: %s in %v is %v, want %v", excepts, a, got, !want, want)
			}
		}
	}
}
