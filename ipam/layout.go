package ipam

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// LayoutVersion is the store layout this allocator reads and writes
// (docs/ipam.md, docs/upgrading.md): its keys live under a prefix that
// names it (DefaultPrefix), and its marker (Keys.Layout) says so.
const LayoutVersion = 2

// layoutMarker is the value at Keys.Layout.
type layoutMarker struct {
	Layout int `json:"layout"`
	// SupersededBy is set by a newer podnet that carried this prefix's
	// data over to a newer layout under another prefix: from then on
	// the data here is stale, and an allocator of this layout must not
	// hand out addresses from it.
	SupersededBy string `json:"supersededBy,omitempty"`
}

// checkMarker refuses a marker of a newer layout, or one a newer layout
// superseded.
func (k Keys) checkMarker(value []byte) error {
	var m layoutMarker
	if err := json.Unmarshal(value, &m); err != nil {
		return errorf(KindInvalid, "IPAM layout marker %s: not JSON (%v): written by another program; this version leaves the store alone", k.Layout(), err)
	}
	switch {
	case m.Layout > LayoutVersion:
		return errorf(KindInvalid, "IPAM layout marker %s says layout v%d, newer than the v%d this version knows: "+
			"a newer podnet wrote the store; this one leaves it alone (run the newer version again)", k.Layout(), m.Layout, LayoutVersion)
	case m.SupersededBy != "":
		return errorf(KindInvalid, "IPAM layout v%d under %q was superseded by a newer layout under %q (marker %s): "+
			"a newer podnet carried its data over; this version would hand out addresses from stale data, so it leaves the store alone (run the newer version again)",
			LayoutVersion, k.prefix(), m.SupersededBy, k.Layout())
	}
	return nil
}

// versionedPrefix splits a prefix that names its layout, as
// DefaultPrefix does ("<base>/v<n>/"), into base (with its slash) and n.
// By hand, not a regexp: compiling one is a fifth of a plugin's package
// initialisation, paid on every exec.
func versionedPrefix(p string) (base string, n int, ok bool) {
	rest, found := strings.CutSuffix(p, "/")
	if !found {
		return "", 0, false
	}
	i := strings.LastIndexByte(rest, '/')
	if i < 0 || !strings.HasPrefix(rest[i+1:], "v") {
		return "", 0, false
	}
	digits := rest[i+2:]
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return "", 0, false
	}
	n, err := strconv.Atoi(digits)
	if err != nil {
		return "", 0, false
	}
	return rest[:i+1], n, true
}

// checkNewerPrefix refuses a store that holds the marker of the next
// layout under the next prefix ("/podnet/v3/" beside "/podnet/v2/"): a
// newer podnet's data, which this version would not see.
func (a *Allocator) checkNewerPrefix(ctx context.Context) error {
	base, n, ok := versionedPrefix(a.keys.prefix())
	if !ok {
		return nil
	}
	next := Keys{Prefix: base + "v" + strconv.Itoa(n+1) + "/"}
	_, err := a.store.Get(ctx, next.Layout())
	switch {
	case err == nil:
		return errorf(KindInvalid, "the store holds a newer IPAM layout under %q (marker %s) beside v%d under %q: "+
			"a newer podnet wrote it; this version leaves the store alone (run the newer version again)", next.prefix(), next.Layout(), LayoutVersion, a.keys.prefix())
	case errors.Is(err, ErrNotFound):
		return nil
	}
	return err
}

// writeMarker records this layout in a store that has no marker. A store
// that cannot hold the key (the Kubernetes store, whose layout is its
// CRDs' API version) refuses, and that is no error: the marker only
// speeds up the next check and tells a newer podnet what it meets.
func (a *Allocator) writeMarker(ctx context.Context) {
	b, _ := json.Marshal(map[string]any{"layout": LayoutVersion, "at": time.Now().UTC()})
	_, _ = a.store.Write(ctx, Write{Key: a.keys.Layout(), ModRevision: 0, Value: b})
}

// checkLayout runs when an operation finds no index for its node (a node's
// first allocation, or a DEL on a node that never allocated): the one
// moment a v1 layout could still hide that node's addresses. It returns
// nil when the store holds no v1 data to fear, migrates it when
// Config.MigrateV1 allows (then ErrConflict, so that the operation starts
// over on the migrated data), and otherwise refuses with an error naming
// the v1 prefix and the command that migrates it. The node index exists
// from a node's first claim on, so steady-state operations never get
// here. It also refuses, writing nothing, a store a newer layout wrote
// or superseded (checkMarker, checkNewerPrefix), and writes the marker
// where there is none and nothing to migrate.
func (a *Allocator) checkLayout(ctx context.Context, node string) error {
	if a.layoutOK.Load() {
		return nil
	}
	kv, err := a.store.Get(ctx, a.keys.Layout())
	if err == nil {
		if err := a.keys.checkMarker(kv.Value); err != nil {
			return err
		}
		if err := a.checkNewerPrefix(ctx); err != nil {
			return err
		}
		a.layoutOK.Store(true)
		return nil
	}
	if !errors.Is(err, ErrNotFound) {
		return err
	}
	if err := a.checkNewerPrefix(ctx); err != nil {
		return err
	}
	from, what, err := a.findV1(ctx, node)
	if err != nil {
		return err
	}
	if from == "" {
		a.writeMarker(ctx)
		return nil
	}
	if !a.cfg.MigrateV1 {
		return errorf(KindInvalid, "the store holds IPAM layout v1 under %q (%s) and no layout marker %s: "+
			"this version keeps layout v2 under %q and would hand out addresses that pods of v1 hold; "+
			"stop the v1 plugins and run `podnet ipam migrate --store <this store> --from %s --prefix %s`",
			from, what, a.keys.Layout(), a.keys.prefix(), from, a.keys.prefix())
	}
	if _, err := MigrateV1(ctx, a.store, Keys{Prefix: from}, a.keys); err != nil {
		return err
	}
	return ErrConflict
}

// findV1 returns the prefix of v1 data that could hold node's addresses,
// and what it found there: v1 keys of the node under the allocator's own
// prefix, or, for the default prefix, v1 pools under V1Prefix.
func (a *Allocator) findV1(ctx context.Context, node string) (string, string, error) {
	p := a.keys.prefix()
	kvs, err := a.store.List(ctx, p+"ipam/affinities/"+node+"/")
	if err != nil {
		return "", "", err
	}
	if len(kvs) > 0 {
		return p, "block affinities of node " + quote(node), nil
	}
	if p != DefaultPrefix {
		return "", "", nil
	}
	if kvs, err = a.store.List(ctx, V1Prefix+"ipam/pools/"); err != nil || len(kvs) == 0 {
		return "", "", err
	}
	return V1Prefix, "pools", nil
}

func sortPrefixes(ps []netip.Prefix) { slices.SortFunc(ps, comparePrefix) }
