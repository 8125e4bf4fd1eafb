package ipam

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"time"
)

// Layout v1 (podnet before layout v2) kept, besides pools and blocks,
// ipam/affinities/<node>/<cidr>, ipam/handles/<handle> and
// workloads/<node>/<namespace>/<pod>/<ifname>. Allocators of layout v2
// cannot see v1 pods' addresses through their handles, so a store holding
// v1 data must be migrated before they run, never silently ignored: the
// allocator refuses (checkLayout), or migrates itself when told it may
// (Config.MigrateV1, bbolt's users: one node, one version of the plugins).

// v1Affinity is the value of a v1 affinity key.
type v1Affinity struct {
	State AffinityState `json:"state"`
	Since time.Time     `json:"since"`
}

// v1Endpoint is what MigrateV1 needs of a v1 workload endpoint.
type v1Endpoint struct {
	Handle  string    `json:"handle"`
	Created time.Time `json:"created"`
}

// MigrateResult counts what MigrateV1 wrote.
type MigrateResult struct {
	Pools, Blocks, Nodes int
	// Existing are keys of layout v2 that were there already and left as
	// they are (a migration run before).
	Existing int
	// Done is set when the layout marker was there already: nothing was
	// read or written.
	Done bool
}

// MigrateV1 carries layout v1 under from over to layout v2 under to
// (they may be the same prefix): pools and blocks are copied (allocation
// attributes naming an endpoint gain AttrCreated from the v1 endpoint of
// their handle; affine blocks gain AffinitySince from their affinity),
// each node's index is built from its v1 affinities (states carried
// over) and from the addresses it holds in blocks not affine to it
// (borrowed, published). The layout marker (Keys.Layout) is written
// last; with it present MigrateV1 does nothing. v1 keys are left where
// they are.
//
// Plugins of layout v1 must not write meanwhile. Keys of layout v2 that
// exist already (from an interrupted run) are kept, so a concurrent or
// repeated run writes nothing twice.
func MigrateV1(ctx context.Context, store Store, from, to Keys) (MigrateResult, error) {
	var res MigrateResult
	if _, err := store.Get(ctx, to.Layout()); err == nil {
		return MigrateResult{Done: true}, nil
	} else if !errors.Is(err, ErrNotFound) {
		return res, err
	}
	v1, err := readV1(ctx, store, from)
	if err != nil {
		return res, err
	}
	indexes := v1.build(time.Now())
	same := from.prefix() == to.prefix()
	for _, p := range v1.pools {
		if !same {
			if err := migrateWrite(ctx, store, to.Pool(p.Name), 0, p, &res.Pools, &res.Existing); err != nil {
				return res, err
			}
		}
	}
	for _, cidr := range sortedPrefixes(v1.blocks) {
		rev := int64(0)
		if same {
			rev = v1.blockRevs[cidr]
		}
		if err := migrateWrite(ctx, store, to.Block(cidr), rev, v1.blocks[cidr], &res.Blocks, &res.Existing); err != nil {
			return res, err
		}
	}
	for _, node := range sortedKeys(indexes) {
		if err := migrateWrite(ctx, store, to.Node(node), 0, indexes[node], &res.Nodes, &res.Existing); err != nil {
			return res, err
		}
	}
	marker, _ := json.Marshal(map[string]any{"layout": 2, "migratedFrom": from.prefix(), "at": time.Now().UTC()})
	_, err = store.Write(ctx, Write{Key: to.Layout(), ModRevision: AnyRevision, Value: marker})
	return res, err
}

// migrateWrite writes v at key if the key is at rev (0: missing); a key
// that exists already is counted in existing and kept.
func migrateWrite(ctx context.Context, store Store, key string, rev int64, v any, n, existing *int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = store.Write(ctx, Write{Key: key, ModRevision: rev, Value: b})
	switch {
	case errors.Is(err, ErrConflict) && rev == 0:
		*existing++
		return nil
	case err != nil:
		return fmt.Errorf("migrate %s: %w", key, err)
	}
	*n++
	return nil
}

// v1Data is a v1 layout, read.
type v1Data struct {
	pools     []Pool
	blocks    map[netip.Prefix]*Block
	blockRevs map[netip.Prefix]int64
	affs      map[string]map[netip.Prefix]v1Affinity // node -> block -> affinity
	created   map[string]time.Time                   // handle -> its endpoint's creation
}

func readV1(ctx context.Context, store Store, from Keys) (*v1Data, error) {
	d := &v1Data{blocks: map[netip.Prefix]*Block{}, blockRevs: map[netip.Prefix]int64{},
		affs: map[string]map[netip.Prefix]v1Affinity{}, created: map[string]time.Time{}}
	p := from.prefix()
	err := eachKV(ctx, store, p+"ipam/pools/", func(kv KV) error {
		var pool Pool
		if err := json.Unmarshal(kv.Value, &pool); err != nil {
			return err
		}
		pool, err := pool.Normalize()
		if err != nil {
			return fmt.Errorf("%w (layout v2 allows blocks of at most %d addresses)", err, 1<<maxBlockHostBits)
		}
		d.pools = append(d.pools, pool)
		return nil
	})
	if err == nil {
		err = eachKV(ctx, store, p+"ipam/blocks/", func(kv KV) error {
			b, err := decodeBlock(kv)
			if err == nil {
				d.blocks[b.CIDR], d.blockRevs[b.CIDR] = b, kv.ModRevision
			}
			return err
		})
	}
	if err == nil {
		err = eachKV(ctx, store, p+"ipam/affinities/", d.addAffinity(p+"ipam/affinities/"))
	}
	if err == nil {
		err = eachKV(ctx, store, p+"workloads/", func(kv KV) error {
			var ep v1Endpoint
			if json.Unmarshal(kv.Value, &ep) == nil && ep.Handle != "" {
				d.created[ep.Handle] = ep.Created
			}
			return nil // an endpoint that does not decode only loses its time
		})
	}
	if err != nil {
		return nil, errorf(KindInvalid, "migrate layout v1 under %q: %v", p, err)
	}
	return d, nil
}

func (d *v1Data) addAffinity(prefix string) func(KV) error {
	return func(kv KV) error {
		node, rest, ok := strings.Cut(strings.TrimPrefix(kv.Key, prefix), "/")
		if !ok {
			return fmt.Errorf("%s: not an affinity key", kv.Key)
		}
		cidr, err := Keys{}.ParseBlockKey(rest)
		if err != nil {
			return err
		}
		var af v1Affinity
		if err := json.Unmarshal(kv.Value, &af); err != nil {
			return fmt.Errorf("%s: %w", kv.Key, err)
		}
		if d.affs[node] == nil {
			d.affs[node] = map[netip.Prefix]v1Affinity{}
		}
		d.affs[node][cidr] = af
		return nil
	}
}

func eachKV(ctx context.Context, store Store, prefix string, fn func(KV) error) error {
	kvs, err := store.List(ctx, prefix)
	if err != nil {
		return err
	}
	for _, kv := range kvs {
		if err := fn(kv); err != nil {
			return err
		}
	}
	return nil
}

// build completes the blocks for layout v2 and returns the indexes.
func (d *v1Data) build(now time.Time) map[string]*NodeIndex {
	indexes := map[string]*NodeIndex{}
	index := func(node string) *NodeIndex {
		if indexes[node] == nil {
			indexes[node] = &NodeIndex{Node: node}
		}
		return indexes[node]
	}
	for node, affs := range d.affs {
		for cidr, af := range affs {
			index(node).setEntry(NodeBlock{CIDR: cidr, State: af.State, Since: af.Since})
		}
	}
	for _, cidr := range sortedPrefixes(d.blocks) {
		b := d.blocks[cidr]
		for i, at := range b.Attributes {
			if t, ok := d.created[at.Handle]; ok && at.Extra[AttrEndpoint] != "" && at.Extra[AttrCreated] == "" {
				b.Attributes[i].Extra = maps.Clone(at.Extra)
				b.Attributes[i].Extra[AttrCreated] = t.UTC().Format(time.RFC3339Nano)
			}
		}
		if node, ok := strings.CutPrefix(b.Affinity, "host:"); ok {
			af, had := d.affs[node][cidr]
			if !had {
				af = v1Affinity{State: AffinityConfirmed, Since: now}
				index(node).setEntry(NodeBlock{CIDR: cidr, State: af.State, Since: af.Since})
			}
			b.AffinitySince = af.Since
		}
		for ord, ref := range b.Owners {
			if at := b.Attributes[max(ref, 1)-1]; ref != 0 && at.Node != "" && b.Affinity != HostAffinity(at.Node) {
				index(at.Node).publish(cidr, []netip.Addr{b.Addr(ord)})
			}
		}
	}
	return indexes
}

func sortedPrefixes[V any](m map[netip.Prefix]V) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	sortPrefixes(out)
	return out
}
