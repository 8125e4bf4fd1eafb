package tag

import "testing"

func TestAlias(t *testing.T) {
	o := Owner{Network: "net-1", ContainerID: "abc.def", IfName: "eth0"}
	got, ok := ParseAlias(o.Alias())
	if !ok || got != o {
		t.Fatalf("round trip: %+v %v", got, ok)
	}
	c, ok := ParseComment("net-1", o.Comment())
	if !ok || c != o {
		t.Fatalf("comment round trip: %+v %v", c, ok)
	}
	if s := o.String(); s != "net-1 abc.def eth0" {
		t.Fatalf("String %q", s)
	}
	if got, ok := ParseOwner(o.String()); !ok || got != o {
		t.Fatalf("String round trip: %+v %v", got, ok)
	}
	for _, bad := range []string{"", "podnet", "podnet a b", "podnet a b c d", "other a b c"} {
		if _, ok := ParseAlias(bad); ok {
			t.Errorf("alias %q accepted", bad)
		}
	}
	for _, bad := range []string{"", "no owner", "a b c d", "a  b"} {
		if _, ok := ParseOwner(bad); ok {
			t.Errorf("owner %q accepted", bad)
		}
	}
}
