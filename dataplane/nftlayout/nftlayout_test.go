package nftlayout

import (
	"os"
	"strings"
	"testing"

	"github.com/google/nftables"

	"github.com/podnet/podnet/internal/testutil"
)

func TestVersion(t *testing.T) {
	for _, tc := range []struct {
		names []string
		want  uint32
	}{
		{nil, 0},
		{[]string{"pods4", "layout", "layout-vx", "layout-v-1"}, 0},
		{[]string{"pods4", "layout-v1"}, 1},
		{[]string{"layout-v1", "layout-v3", "layout-v2"}, 3},
	} {
		var sets []*nftables.Set
		for _, n := range tc.names {
			sets = append(sets, &nftables.Set{Name: n})
		}
		if got := Version(sets); got != tc.want {
			t.Errorf("Version(%v) = %d, want %d", tc.names, got, tc.want)
		}
	}
}

// connIn is an nftables connection bound to a fresh node namespace.
func connIn(t *testing.T) *nftables.Conn {
	t.Helper()
	testutil.RequireRoot(t)
	_, path := testutil.NewNodeNetNS(t)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCheck: in the kernel, a missing table, an unmarked one, one of the
// same version and an older one pass; a newer one fails with both
// versions and the table named; a table in another family is another
// table.
func TestCheck(t *testing.T) {
	c := connIn(t)
	tab := &nftables.Table{Name: "podnet-test", Family: nftables.TableFamilyINet}
	check := func(known uint32) error { _, err := Check(c, tab, known); return err }
	if err := check(1); err != nil {
		t.Fatalf("no table: %v", err)
	}
	c.AddTable(tab)
	if err := c.AddSet(&nftables.Set{Table: tab, Name: "pods4", KeyType: nftables.TypeIPAddr}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := check(1); err != nil {
		t.Fatalf("unmarked table: %v", err)
	}
	for _, v := range []uint32{1, 2} {
		found, err := Check(c, tab, v)
		if err != nil || found != v-1 {
			t.Fatalf("before v%d: found v%d, %v", v, found, err)
		}
		c.AddTable(tab)
		if err := Declare(c, tab, v, found); err != nil {
			t.Fatal(err)
		}
		if err := c.Flush(); err != nil {
			t.Fatalf("declare v%d: %v", v, err)
		}
	}
	// Declaring again is a no-op.
	if err := Declare(c, tab, 2, 2); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("declare again: %v", err)
	}
	for _, known := range []uint32{2, 3} {
		if err := check(known); err != nil {
			t.Errorf("v2 table, known v%d: %v", known, err)
		}
	}
	err := check(1)
	if !IsNewer(err) {
		t.Fatalf("v2 table, known v1: %v, want a NewerError", err)
	}
	for _, want := range []string{"inet podnet-test", "layout v2", "v1 this podnet knows", "layout-v2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	bridge := &nftables.Table{Name: "podnet-test", Family: nftables.TableFamilyBridge}
	if _, err := Check(c, bridge, 1); err != nil {
		t.Errorf("the bridge family's table (none): %v", err)
	}
}
