package ipam

import (
	"context"
	"errors"
	"net/netip"
	"slices"
)

// checkLayout runs when an operation finds no index for its node (a node's
// first allocation, or a DEL on a node that never allocated): the one
// moment a v1 layout could still hide that node's addresses. It returns
// nil when the store holds no v1 data to fear, migrates it when
// Config.MigrateV1 allows (then ErrConflict, so that the operation starts
// over on the migrated data), and otherwise refuses with an error naming
// the v1 prefix and the command that migrates it. The node index exists
// from a node's first claim on, so steady-state operations never get
// here.
func (a *Allocator) checkLayout(ctx context.Context, node string) error {
	if a.layoutOK.Load() {
		return nil
	}
	_, err := a.store.Get(ctx, a.keys.Layout())
	if err == nil {
		a.layoutOK.Store(true)
		return nil
	}
	if !errors.Is(err, ErrNotFound) {
		return err
	}
	from, what, err := a.findV1(ctx, node)
	if err != nil || from == "" {
		return err
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
