package wireguard

import "testing"

func TestUserspaceProcs(t *testing.T) {
	for _, c := range []struct {
		def  int
		set  bool
		want int
	}{
		{1, false, 1},
		{2, false, 1},
		{3, false, 1},
		{4, false, 2},
		{64, false, 32},
		{2, true, 2},
		{8, true, 8},
	} {
		if got := userspaceProcs(c.def, c.set); got != c.want {
			t.Errorf("userspaceProcs(%d, operator set %v) = %d, want %d", c.def, c.set, got, c.want)
		}
	}
}
