package ipamtest

import (
	"bytes"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/podnet/podnet/ipam"
)

// invalidPools are stored pool values the allocator cannot serve from:
// a node selector the IPPool CRD let through before it validated them
// (a Kubernetes set-based term, which ParseSelector does not take), and
// a value that is not a pool at all.
var invalidPools = map[string]string{
	"badsel":  `{"name":"badsel","cidr":"10.14.0.0/16","nodeSelector":"zone in (a,b)"}`,
	"garbage": `{"name":"garbage","cidr":`,
}

// putInvalidPools writes invalidPools behind the allocator's back. It
// reports false for a store that refuses them (opts.RefusesInvalidPools),
// after checking that it does. A store that decodes pool values itself
// (opts.DecodesPools) must refuse the one that does not decode; the
// tests then go on with the other alone, and skip what needs both.
func (e env) putInvalidPools(opts Options) bool {
	t := e.t
	t.Helper()
	for name, v := range invalidPools {
		_, err := e.store.Write(ctxT(t), ipam.Write{Key: e.keys.Pool(name), Value: []byte(v)})
		refuses := opts.RefusesInvalidPools || opts.DecodesPools && name == "garbage"
		switch {
		case refuses && err == nil:
			t.Fatalf("the store accepted pool %s = %s, which the allocator refuses", name, v)
		case !refuses && err != nil:
			t.Fatalf("write pool %s: %v", name, err)
		}
	}
	return !opts.RefusesInvalidPools
}

// testInvalidPoolSkipped: one pool whose stored value is invalid does not
// stop the others: allocations that do not name it are served.
func testInvalidPoolSkipped(e env, opts Options) {
	t := e.t
	a := e.alloc(ipam.Config{})
	mustPool(t, a, "good", "10.13.0.0/16", 0)
	if !e.putInvalidPools(opts) {
		return
	}
	for _, args := range []ipam.AutoAssignArgs{
		{Handle: "net.any", Node: "n1", Num4: 1},
		{Handle: "net.named", Node: "n2", Num4: 1, Pools4: []string{"good"}},
	} {
		got, err := a.AutoAssign(ctxT(t), args)
		if err != nil {
			t.Fatalf("AutoAssign(pools %v) with an invalid pool in the store: %v; want an address of pool good", args.Pools4, err)
		}
		if len(got.IPv4) != 1 || !netip.MustParsePrefix("10.13.0.0/16").Contains(got.IPv4[0].Addr()) {
			t.Fatalf("AutoAssign(pools %v) = %+v, want an address of pool good", args.Pools4, got)
		}
	}
	if _, err := a.AssignIP(ctxT(t), ipam.AssignIPArgs{Addr: netip.MustParseAddr("10.13.7.7"), Handle: "net.ip", Node: "n1"}); err != nil {
		t.Fatalf("AssignIP in pool good: %v", err)
	}
	for _, h := range []string{"net.any", "net.ip"} {
		if err := a.ReleaseByHandle(ctxT(t), "n1", h); err != nil {
			t.Fatal(err)
		}
	}
}

// testInvalidPoolReported: an invalid pool is named, with what is wrong,
// wherever it matters: to an allocation that names it or an address in
// it (KindInvalid), in Pools, in Check's report and in the allocator's
// log. PutPool mends it, keeping the CIDR its blocks were cut by.
func testInvalidPoolReported(e env, opts Options) {
	t := e.t
	var log lockedBuffer
	a := e.alloc(ipam.Config{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	mustPool(t, a, "good", "10.13.0.0/16", 0)
	if !e.putInvalidPools(opts) {
		return
	}
	wantInvalid := func(what string, err error, name, problem string) {
		t.Helper()
		var bad *ipam.InvalidPoolError
		if !errors.As(err, &bad) || bad.Name != name || ipam.KindOf(err) != ipam.KindInvalid ||
			!strings.Contains(err.Error(), `pool "`+name+`"`) || !strings.Contains(err.Error(), problem) {
			t.Errorf("%s: err = %v, want a KindInvalid InvalidPoolError naming pool %q and %q", what, err, name, problem)
		}
	}
	_, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "net.bad", Node: "n1", Num4: 1, Pools4: []string{"badsel"}})
	wantInvalid("AutoAssign naming badsel", err, "badsel", `nodeSelector "zone in (a,b)"`)
	if opts.DecodesPools {
		// The rest needs both invalid pools in the store.
		return
	}
	_, err = a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "net.bad", Node: "n1", Num4: 1, Pools4: []string{"good", "garbage"}})
	wantInvalid("AutoAssign naming garbage", err, "garbage", "does not decode")
	_, err = a.AssignIP(ctxT(t), ipam.AssignIPArgs{Addr: netip.MustParseAddr("10.14.0.9"), Handle: "net.bad", Node: "n1"})
	wantInvalid("AssignIP in badsel", err, "badsel", "nodeSelector")
	err = a.DeletePool(ctxT(t), "badsel")
	wantInvalid("DeletePool of badsel", err, "badsel", "nodeSelector")

	pools, invalid, err := a.Pools(ctxT(t))
	if err != nil || len(pools) != 1 || pools[0].Name != "good" || len(invalid) != 2 ||
		invalid[0].Name != "badsel" || invalid[1].Name != "garbage" || invalid[0].Key != e.keys.Pool("badsel") {
		t.Fatalf("Pools = %+v, %v, %v; want good, and badsel and garbage invalid", pools, invalid, err)
	}
	rep, err := a.Check(ctxT(t), ipam.CheckOptions{})
	if err != nil || len(rep.Corrupt) != 2 || !strings.Contains(rep.Corrupt[0], `pool "badsel"`) ||
		!strings.Contains(rep.Corrupt[1], `pool "garbage"`) {
		t.Fatalf("Check = %+v, %v; want both invalid pools reported", rep, err)
	}
	for _, name := range []string{"badsel", "garbage"} {
		if !strings.Contains(log.String(), "pool="+name) {
			t.Errorf("the allocator's log does not name pool %s:\n%s", name, log.String())
		}
	}

	mendInvalidPools(t, a)
}

// mendInvalidPools: PutPool mends the invalid pools badsel and garbage,
// keeping the CIDR that decoded (blocks may have been cut by it); the
// mended pool serves an allocation.
func mendInvalidPools(t *testing.T, a *ipam.Allocator) {
	t.Helper()
	moved := ipam.Pool{Name: "badsel", CIDR: netip.MustParsePrefix("10.15.0.0/16")}
	if err := a.PutPool(ctxT(t), moved); ipam.KindOf(err) != ipam.KindInvalid {
		t.Errorf("PutPool moving invalid pool badsel to another cidr: %v, want KindInvalid", err)
	}
	// A valid selector is refused too: no node labels reach the
	// allocator, so it could not be honoured.
	withSel := ipam.Pool{Name: "badsel", CIDR: netip.MustParsePrefix("10.14.0.0/16"), NodeSelector: "zone=a"}
	if err := a.PutPool(ctxT(t), withSel); ipam.KindOf(err) != ipam.KindInvalid || !strings.Contains(err.Error(), `nodeSelector "zone=a"`) {
		t.Errorf("PutPool of a pool with nodeSelector zone=a: %v, want KindInvalid naming it", err)
	}
	for _, p := range []ipam.Pool{
		{Name: "badsel", CIDR: netip.MustParsePrefix("10.14.0.0/16")},
		{Name: "garbage", CIDR: netip.MustParsePrefix("10.16.0.0/16")},
	} {
		if err := a.PutPool(ctxT(t), p); err != nil {
			t.Fatalf("PutPool mending %s: %v", p.Name, err)
		}
	}
	got, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "net.mended", Node: "n1", Num4: 1, Pools4: []string{"garbage"}})
	if err != nil || len(got.IPv4) != 1 || !netip.MustParsePrefix("10.16.0.0/16").Contains(got.IPv4[0].Addr()) {
		t.Fatalf("AutoAssign from the mended pool = %+v, %v", got, err)
	}
	if err := a.ReleaseByHandle(ctxT(t), "n1", "net.mended"); err != nil {
		t.Fatal(err)
	}
	mustClean(t, a)
}

// lockedBuffer is a log sink for an allocator used from several
// goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
