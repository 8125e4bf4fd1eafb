package agent

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/podnet/podnet/agent/clusterstate"
	"github.com/podnet/podnet/agent/internal/nodetest"
	"github.com/podnet/podnet/agent/route"
	"github.com/podnet/podnet/dataplane/policyrules"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/ipam/store/bolt"
	"github.com/podnet/podnet/netns"
)

// TestServiceFailureEndsRun: /readyz names every service, and the one
// that is not ready with why; a service that fails ends Run with its
// error, named, and stops the others (the pod then restarts).
func TestServiceFailureEndsRun(t *testing.T) {
	node := nodetest.New(t, pfx("198.18.0.11/24"))
	store, err := bolt.Open(context.Background(), bolt.Options{Path: filepath.Join(t.TempDir(), "ipam.db"), HoldOpen: true, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	a, err := New(Config{Node: "a", Store: store, Mode: route.ModeHostGW, UnderlayInterface: "ul0", NetNS: node.Path, Logger: testLogger(t, "a")})
	if err != nil {
		t.Fatal(err)
	}
	fail := make(chan error)
	a.extra = []service{{name: "doomed", ready: func() error { return errors.New("waiting to fail") },
		run: func(ctx context.Context) error {
			select {
			case <-ctx.Done():
				return nil
			case err := <-fail:
				return err
			}
		}}}
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	done := make(chan error, 1)
	go func() { done <- a.Run(context.Background()) }()

	readyz := func() (int, string) {
		resp, err := http.Get(srv.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	testutil.WaitFor(t, "source and routes ready", 30*time.Second, func() (bool, error) {
		_, body := readyz()
		return strings.Contains(body, "source: ok\n") && strings.Contains(body, "routes: ok\n"), nil
	})
	code, body := readyz()
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "doomed: not ready: waiting to fail\n") {
		t.Fatalf("/readyz %d:\n%s\nwant 503 naming doomed", code, body)
	}
	if err := a.Ready(); err == nil || !strings.HasPrefix(err.Error(), "doomed: not ready") {
		t.Fatalf("Ready() = %v, want doomed named", err)
	}

	fail <- errors.New("socket gone for good")
	select {
	case err := <-done:
		if err == nil || err.Error() != "doomed: socket gone for good" {
			t.Fatalf("Run returned %v, want the doomed service's error, named", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still running 10s after a service failed")
	}
}

// brokenSource is a datastore whose watch cannot be set up: its Run
// fails at once, as the Kubernetes source's does when an informer cannot
// be made.
type brokenSource struct{}

func (brokenSource) Run(context.Context, *clusterstate.Self, func()) error {
	return errors.New("informer of Nodes: cannot be set up")
}
func (brokenSource) Ready() error { return errors.New("never synced") }

// TestSourceFailureEndsRun: the datastore's failure ends the agent with
// its error, named, instead of leaving a process that is never ready and
// never restarted.
func TestSourceFailureEndsRun(t *testing.T) {
	node := nodetest.New(t, pfx("198.18.0.12/24"))
	store, err := bolt.Open(context.Background(), bolt.Options{Path: filepath.Join(t.TempDir(), "ipam.db"), HoldOpen: true, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	a, err := New(Config{Node: "a", Store: store, Mode: route.ModeHostGW, UnderlayInterface: "ul0", NetNS: node.Path, Logger: testLogger(t, "a")})
	if err != nil {
		t.Fatal(err)
	}
	a.src = brokenSource{}
	done := make(chan error, 1)
	go func() { done <- a.Run(context.Background()) }()
	select {
	case err := <-done:
		if err == nil || err.Error() != "source: informer of Nodes: cannot be set up" {
			t.Fatalf("Run returned %v, want the source's error, named", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still running 10s after its source failed")
	}
}

// TestPolicyTableRemovedWhenOff: an agent without the policy service
// removes the table an earlier run with it left, so that no rules stay
// in force that nobody updates.
func TestPolicyTableRemovedWhenOff(t *testing.T) {
	node := nodetest.New(t, pfx("198.18.0.13/24"))
	table := &nftables.Table{Name: policyrules.TableName, Family: nftables.TableFamilyINet}
	tables := func() (n int) {
		if err := netns.Do(node.Path, func() error {
			c, err := nftables.New()
			if err != nil {
				return err
			}
			ts, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
			for _, x := range ts {
				if x.Name == table.Name {
					n++
				}
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if err := netns.Do(node.Path, func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		c.AddTable(table)
		return c.Flush()
	}); err != nil {
		t.Fatal(err)
	}
	if tables() != 1 {
		t.Fatal("no policy table to start with")
	}
	store, err := bolt.Open(context.Background(), bolt.Options{Path: filepath.Join(t.TempDir(), "ipam.db"), HoldOpen: true, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	a, err := New(Config{Node: "a", Store: store, Mode: route.ModeHostGW, UnderlayInterface: "ul0", NetNS: node.Path, Logger: testLogger(t, "a")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	testutil.WaitFor(t, "the agent ready", 30*time.Second, func() (bool, error) { return a.Ready() == nil, nil })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := tables(); n != 0 {
		t.Errorf("%d policy tables left after an agent without network policy ran", n)
	}
}
