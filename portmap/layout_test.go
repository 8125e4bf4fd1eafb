package portmap

import (
	"errors"
	"testing"

	"github.com/google/nftables"

	"github.com/podnet/podnet/dataplane/nftlayout"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

// TestLayoutMarker: the table's setup marks it with this version, and
// does not rewrite a table a newer podnet marked.
func TestLayoutMarker(t *testing.T) {
	testutil.RequireRoot(t)
	_, node := testutil.NewNodeNetNS(t)
	err := netns.Do(node, func() error {
		n, err := OpenNFT()
		if err != nil {
			return err
		}
		defer n.Close()
		if err := n.Apply(Changes{}, true); err != nil {
			t.Fatalf("setup: %v", err)
		}
		if v, err := nftlayout.Check(n.conn, n.rs.Table, Layout); err != nil || v != Layout {
			t.Fatalf("after setup: layout v%d, %v", v, err)
		}
		n.conn.AddTable(n.rs.Table)
		if err := nftlayout.Declare(n.conn, n.rs.Table, Layout+1, Layout); err != nil {
			return err
		}
		n.conn.DelChain(&nftables.Chain{Name: ChainInput, Table: n.rs.Table})
		if err := n.conn.Flush(); err != nil {
			return err
		}
		err = n.Apply(Changes{}, true)
		if !nftlayout.IsNewer(err) {
			t.Fatalf("setup over a newer table: %v", err)
		}
		if !errors.Is(err, &Error{Kind: KindIO}) {
			t.Errorf("kind of %v", err)
		}
		chains, err := n.conn.ListChainsOfTableFamily(nftables.TableFamilyINet)
		if err != nil {
			return err
		}
		for _, c := range chains {
			if c.Table.Name == TableName && c.Name == ChainInput {
				t.Error("setup made the newer table's chains again")
			}
		}
		n.conn.DelTable(n.rs.Table)
		return n.conn.Flush()
	})
	if err != nil {
		t.Fatal(err)
	}
}
