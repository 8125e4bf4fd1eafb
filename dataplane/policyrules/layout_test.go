package policyrules

import (
	"os"
	"testing"

	"github.com/google/nftables"

	"github.com/podnet/podnet/dataplane/nftlayout"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/policy"
)

// TestLayoutMarker: the table this version writes carries its marker; a
// table a newer podnet wrote is neither replaced (Apply, Resync) nor
// removed, and the error names the table and both versions.
func TestLayoutMarker(t *testing.T) {
	testutil.RequireRoot(t)
	_, node := testutil.NewNodeNetNS(t)
	f, err := os.Open(node)
	must(t, err)
	t.Cleanup(func() { f.Close() })
	r, err := New("n1", WithNetNSFd(int(f.Fd())))
	must(t, err)
	defer r.Close()
	ir := policy.Compile(&policy.Snapshot{Namespaces: []policy.Namespace{{Name: "x"}}}, policy.Options{Node: "n1"})
	_, err = r.Apply(ir)
	must(t, err)
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	must(t, err)
	if v, err := nftlayout.Check(c, table(), Layout); err != nil || v != Layout {
		t.Fatalf("after Apply: layout v%d, %v; want v%d", v, err, Layout)
	}

	// A newer podnet takes the table over.
	tab := table()
	c.AddTable(tab)
	must(t, nftlayout.Declare(c, tab, Layout+1, Layout))
	must(t, c.Flush())
	before := dumpTable(t, node)
	if _, err := r.Resync(ir); !nftlayout.IsNewer(err) {
		t.Errorf("Resync over a newer table: %v", err)
	}
	if _, err := r.Apply(ir); !nftlayout.IsNewer(err) {
		t.Errorf("Apply over a newer table: %v", err)
	}
	if err := r.Remove(); !nftlayout.IsNewer(err) {
		t.Errorf("Remove of a newer table: %v", err)
	}
	if after := dumpTable(t, node); !equalLines(before, after) {
		t.Errorf("the newer table changed:\n%v\n->\n%v", before, after)
	}
	// Back to this version's layout (an operator deleted the table).
	c.DelTable(tab)
	must(t, c.Flush())
	_, err = r.Resync(ir)
	must(t, err)
	must(t, r.Remove())
	if tableExists(t, node) {
		t.Error("table left after Remove")
	}
}

func equalLines(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
