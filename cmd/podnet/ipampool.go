package main

import (
	"fmt"
	"io"
	"net/netip"
	"sort"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/podnet/podnet/agent/clusterstate"
	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/kube"
)

func (o *ipamOptions) poolCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "pool", Short: "Manage address pools"}
	var blockSize int
	var disabled bool
	var lsOutput string
	add := &cobra.Command{
		Use:   "add NAME CIDR",
		Short: "Create or replace a pool",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cidr, err := netip.ParsePrefix(args[1])
			if err != nil {
				return cni.Errorf(cni.CodeInvalidNetworkConfig, "pool %q: cidr %q: %v", args[0], args[1], err)
			}
			return o.with(cmd, func(a *ipam.Allocator) error {
				return a.PutPool(cmd.Context(), ipam.Pool{Name: args[0], CIDR: cidr, BlockSize: blockSize, Disabled: disabled})
			})
		},
	}
	add.Flags().IntVar(&blockSize, "block-size", 0, "block prefix length (default /26 for IPv4, /122 for IPv6)")
	add.Flags().BoolVar(&disabled, "disabled", false, "hand out no new addresses from the pool")
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List pools",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.with(cmd, func(a *ipam.Allocator) error {
				pools, invalid, err := a.Pools(cmd.Context())
				if err != nil {
					return err
				}
				sort.Slice(pools, func(i, j int) bool { return pools[i].Name < pools[j].Name })
				return writeOutput(cmd.OutOrStdout(), lsOutput, poolList{Pools: append([]ipam.Pool{}, pools...), Invalid: errorStrings(invalid)})
			})
		},
	}
	addOutputFlag(ls, &lsOutput, outputTable, outputJSON)
	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "Delete a pool that has no allocated address (its empty blocks go with it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.with(cmd, func(a *ipam.Allocator) error {
				return a.DeletePool(cmd.Context(), args[0])
			})
		},
	}
	cmd.AddCommand(add, ls, rm)
	return cmd
}

// poolList is `ipam pool ls -o json`.
type poolList struct {
	Pools []ipam.Pool `json:"pools"`
	// Invalid: the pools skipped because their stored value is invalid.
	Invalid []string `json:"invalid"`
}

func (r poolList) writeText(out io.Writer) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tCIDR\tBLOCK SIZE\tSELECTOR\tDISABLED")
	for _, p := range r.Pools {
		fmt.Fprintf(w, "%s\t%s\t/%d\t%s\t%v\n", p.Name, p.CIDR, p.BlockSize, orDash(p.NodeSelector), p.Disabled)
	}
	for _, bad := range r.Invalid {
		fmt.Fprintf(w, "invalid: %s\n", bad)
	}
	return w.Flush()
}

func (o *ipamOptions) nodeCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "node", Short: "Manage nodes in the IPAM"}
	var releaseAddrs bool
	rm := &cobra.Command{
		Use:   "rm NODE",
		Short: "Remove a node: let its blocks go (empty ones are deleted), and delete its registration",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.withStore(cmd, func(a *ipam.Allocator, st ipam.Store) error {
				if err := a.RemoveNode(cmd.Context(), args[0], ipam.RemoveNodeOptions{ReleaseAddresses: releaseAddrs}); err != nil {
					return err
				}
				// On the Kubernetes API the node's registration is its
				// Node object, not the store's: nothing more to delete.
				if _, ok := kube.ParseSpec(o.cfg.Store); ok {
					return nil
				}
				// Without its record, every agent drops the node's routes
				// at once instead of when its lease would have expired.
				_, err := st.Write(cmd.Context(), ipam.Write{Key: clusterstate.NodeKey(o.prefix(), args[0]), ModRevision: ipam.AnyRevision, Delete: true})
				return err
			})
		},
	}
	rm.Flags().BoolVar(&releaseAddrs, "release-addresses", false, "also free every address still allocated to the node (its pods are gone)")
	cmd.AddCommand(rm)
	return cmd
}

func (o *ipamOptions) migrateCommand() *cobra.Command {
	from := ipam.V1Prefix
	var output string
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Carry an IPAM of layout v1 over to layout v2 (run once, with the plugins of v1 stopped)",
		Long: `migrate copies the pools and blocks of layout v1 under --from to layout v2
under --prefix, builds each node's index from its v1 block affinities and
the addresses it borrowed, and records the endpoints' creation times in the
allocations' attributes. It writes the layout marker last; allocators of v2
refuse a store holding v1 data until it is there. Plugins of v1 must not
write meanwhile. v1 keys are left in place. Running it again does nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.withStore(cmd, func(_ *ipam.Allocator, st ipam.Store) error {
				res, err := ipam.MigrateV1(cmd.Context(), st, ipam.Keys{Prefix: from}, ipam.Keys{Prefix: o.prefix()})
				if err != nil {
					return err
				}
				rep := migrateReport{From: from, To: o.prefix(), AlreadyDone: res.Done, Pools: res.Pools, Blocks: res.Blocks, Nodes: res.Nodes, Existing: res.Existing}
				return writeOutput(cmd.OutOrStdout(), output, rep)
			})
		},
	}
	addOutputFlag(cmd, &output, outputText, outputJSON)
	cmd.Flags().StringVar(&from, "from", from, "key prefix of the layout v1 data")
	return cmd
}

// migrateReport is `ipam migrate -o json`: the prefixes, and what was
// carried over (nothing when AlreadyDone: the layout marker was there).
type migrateReport struct {
	From        string `json:"from"`
	To          string `json:"to"`
	AlreadyDone bool   `json:"alreadyDone"`
	Pools       int    `json:"pools"`
	Blocks      int    `json:"blocks"`
	Nodes       int    `json:"nodeIndexes"`
	// Existing are keys of layout v2 there already, left as they were.
	Existing int `json:"existing"`
}

func (r migrateReport) writeText(w io.Writer) error {
	if r.AlreadyDone {
		_, err := fmt.Fprintf(w, "already migrated: %s holds the layout marker\n", r.To)
		return err
	}
	_, err := fmt.Fprintf(w, "migrated %s to %s: %d pools, %d blocks, %d node indexes (%d keys there already)\n",
		r.From, r.To, r.Pools, r.Blocks, r.Nodes, r.Existing)
	return err
}
