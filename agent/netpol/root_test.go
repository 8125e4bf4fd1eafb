package netpol

import (
	"context"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/podnet/podnet/dataplane/nflog"
	"github.com/podnet/podnet/dataplane/nftlayout"
	"github.com/podnet/podnet/dataplane/policyrules"
	itestutil "github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

// table is what the policy table of a namespace holds, by name.
type table struct {
	exists bool
	chains []string            // the per-pod chains
	sets   []string            // the peer, CIDR and port sets
	maps   map[string][]string // in4, out4, ...: the addresses dispatched
	node4  []string
}

var baseChains = []string{"forward", "forward-ingress", "input", "output"}

func readTable(t testing.TB, path string) table {
	t.Helper()
	tb, err := tryReadTable(path)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// tryReadTable lists the table's parts, each with a request of its own:
// a commit between two of them gives a view no commit made (a map's
// jump to a chain not listed, a set gone before its elements are read),
// which is why waitTable wants two equal reads in a row.
func tryReadTable(path string) (table, error) {
	var tb table
	err := netns.Do(path, func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
		if err != nil {
			return err
		}
		var pt *nftables.Table
		for _, x := range tables {
			if x.Name == policyrules.TableName {
				pt = x
			}
		}
		if pt == nil {
			return nil
		}
		tb.exists = true
		chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
		if err != nil {
			return err
		}
		for _, ch := range chains {
			if ch.Table.Name == policyrules.TableName && !slices.Contains(baseChains, ch.Name) {
				tb.chains = append(tb.chains, ch.Name)
			}
		}
		sets, err := c.GetSets(pt)
		if err != nil {
			return err
		}
		tb.maps = map[string][]string{}
		for _, s := range sets {
			elems, err := c.GetSetElements(s)
			if err != nil {
				return err
			}
			var keys []string
			for _, e := range elems {
				if a, ok := netip.AddrFromSlice(e.Key); ok {
					keys = append(keys, a.String())
				}
			}
			switch {
			case s.IsMap:
				tb.maps[s.Name] = keys
			case s.Name == "node4":
				tb.node4 = keys
			case s.Name == nftlayout.MarkerName(policyrules.Layout):
				// the table's layout marker
			case s.Name != "node6":
				tb.sets = append(tb.sets, s.Name)
			}
		}
		return nil
	})
	return tb, err
}

// TestServiceProgramsTable runs the service against a fake API in a fresh
// network namespace and checks the kernel's table after each change: the
// dispatch of an isolated local pod appears, and deleting its policy
// removes every chain, set and element it had.
func TestServiceProgramsTable(t *testing.T) {
	itestutil.RequireRoot(t)
	_, path := itestutil.NewNodeNetNS(t)
	c := newCluster(t)
	c.addNamespace("x", nil)
	c.addNode(self, "198.18.0.1")
	c.addPod(apiPod("x", "db", self, map[string]string{"app": "db"}, "10.244.0.2", "fd00::2"))
	c.addPod(apiPod("x", "web", "n2", map[string]string{"app": "web"}, "10.244.1.2"))
	reg := prometheus.NewRegistry()
	s := New(Config{Node: self, NetNS: path, Sources: c.sources(), Registry: reg})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	t.Cleanup(stop)

	waitTable := func(what string, ok func(table) bool) table {
		t.Helper()
		var tb table
		itestutil.Eventually(t, what, 5*time.Second, func() bool {
			a, err := tryReadTable(path)
			if err != nil {
				return false
			}
			b, err := tryReadTable(path)
			if err != nil || !reflect.DeepEqual(a, b) {
				return false
			}
			tb = b
			return ok(tb)
		})
		return tb
	}
	tb := waitTable("the table with no pod chains", func(tb table) bool { return tb.exists })
	if len(tb.chains) != 0 || len(tb.sets) != 0 || !slices.Equal(tb.node4, []string{"198.18.0.1"}) {
		t.Errorf("table without policies: %+v, want no chains or sets, node4 the Node's address", tb)
	}
	// The table is in the kernel the moment Apply commits; the service
	// marks itself ready when Apply returns, a moment later.
	itestutil.Eventually(t, "ready after the first apply", 5*time.Second, func() bool { return s.Ready() == nil })

	c.addPolicy(denyFrom("x", "db", "db", "web"))
	tb = waitTable("db's ingress dispatch", func(tb table) bool {
		return slices.Contains(tb.maps["in4"], "10.244.0.2") && len(tb.chains) == 1 && len(tb.sets) > 0
	})
	if !slices.Equal(tb.maps["in6"], []string{"fd00::2"}) || len(tb.maps["out4"]) != 0 || len(tb.chains) != 1 || len(tb.sets) == 0 {
		t.Errorf("table with x/db: %+v, want one ingress chain for db, its two addresses in in4/in6, its peer set", tb)
	}
	// The collector reads the kernel's counters: none counted yet, but
	// reading must work in the namespace.
	if n, err := testutil.GatherAndCount(reg, "podnet_policy_isolated_pods"); err != nil || n != 2 {
		t.Errorf("isolated_pods series: %d, %v", n, err)
	}
	if v := testutil.ToFloat64(s.m.isolated.WithLabelValues("ingress")); v != 1 {
		t.Errorf("isolated ingress pods %v, want 1", v)
	}
	if _, err := reg.Gather(); err != nil {
		t.Errorf("gather with the kernel's counters: %v", err)
	}

	c.deletePolicy("x", "db")
	tb = waitTable("db's rules gone", func(tb table) bool {
		return len(tb.maps["in4"]) == 0 && len(tb.chains) == 0 && len(tb.sets) == 0
	})
	if len(tb.chains) != 0 || len(tb.sets) != 0 || len(tb.maps["in6"]) != 0 {
		t.Errorf("table after the policy's deletion: %+v, want no chain, set or element of it", tb)
	}

	// The table stays when the service stops: pods stay protected while
	// the agent restarts.
	c.addPolicy(denyFrom("x", "db", "db", ""))
	waitTable("db isolated again", func(tb table) bool { return len(tb.chains) == 1 })
	stop()
	if tb := readTable(t, path); !tb.exists || len(tb.chains) != 1 {
		t.Errorf("table after Run returned: %+v, want it in place", tb)
	}
	if names := strings.Join(readTable(t, path).chains, ","); !strings.HasPrefix(names, "in-") {
		t.Errorf("chains %s, want db's in- chain", names)
	}
}

// TestServiceDenyLogSocket: with the deny log on, the service writes the
// log rule into its pod chains and holds the NFLOG group while it runs,
// and releases the group when Run returns (its socket closed: another
// listener can bind it).
func TestServiceDenyLogSocket(t *testing.T) {
	itestutil.RequireRoot(t)
	_, path := itestutil.NewNodeNetNS(t)
	c := newCluster(t)
	c.addNamespace("x", nil)
	c.addNode(self, "198.18.0.1")
	c.addPod(apiPod("x", "db", self, map[string]string{"app": "db"}, "10.244.0.2"))
	c.addPolicy(denyFrom("x", "db", "db", ""))
	const group = 7372
	s := New(Config{Node: self, NetNS: path, Sources: c.sources(), DenyLog: &policyrules.DenyLog{Group: group, Rate: 10, Burst: 20}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stop := sync.OnceValue(func() error { cancel(); return <-done })
	defer stop()
	listen := func() error {
		return netns.Do(path, func() error {
			l, err := nflog.Listen(group)
			if err == nil {
				l.Close()
			}
			return err
		})
	}
	var prefixes []string
	itestutil.Eventually(t, "db's chain with its log rule", 5*time.Second, func() bool {
		prefixes = logPrefixes(t, path)
		return len(prefixes) > 0
	})
	if !slices.Equal(prefixes, []string{"podnet-deny ingress x/db"}) {
		t.Errorf("log prefixes %q, want db's ingress", prefixes)
	}
	if err := listen(); err == nil {
		t.Error("another listener bound the group the service holds")
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := listen(); err != nil {
		t.Errorf("the group is still held after Run returned: %v", err)
	}
}

// logPrefixes are the prefixes of the log statements of the policy table.
func logPrefixes(t testing.TB, path string) []string {
	var out []string
	err := netns.Do(path, func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
		if err != nil {
			return err
		}
		for _, ch := range chains {
			if ch.Table.Name != policyrules.TableName {
				continue
			}
			rules, err := c.GetRules(ch.Table, ch)
			if err != nil {
				return err
			}
			for _, r := range rules {
				for _, e := range r.Exprs {
					if l, ok := e.(*expr.Log); ok {
						out = append(out, string(l.Data))
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Log(err)
	}
	return out
}
