package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/podnet/podnet/agent/clusterstate"
	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/kube"
	"github.com/podnet/podnet/ipam/store/kube/kubehttp"
	"github.com/podnet/podnet/ipamcni"
)

type ipamOptions struct {
	cfg ipamcni.Config
}

// with runs fn with an allocator over the configured store, closed after.
func (o *ipamOptions) with(cmd *cobra.Command, fn func(a *ipam.Allocator) error) error {
	return o.withStore(cmd, func(a *ipam.Allocator, _ ipam.Store) error { return fn(a) })
}

func (o *ipamOptions) withStore(cmd *cobra.Command, fn func(a *ipam.Allocator, st ipam.Store) error) error {
	st, err := o.openStore(cmd.Context())
	if err != nil {
		return err
	}
	defer st.Close()
	return fn(ipam.New(st, ipamcni.AllocatorConfig(&o.cfg)), st)
}

// openStore opens the configured store. The Kubernetes API is reached
// through client-go's transport, as the agent reaches it (HTTP/2, every
// credential a kubeconfig can name), rather than the plugins' minimal
// client: the CLI links client-go anyway.
func (o *ipamOptions) openStore(ctx context.Context) (ipam.Store, error) {
	path, ok := kube.ParseSpec(o.cfg.Store)
	if !ok {
		return ipamcni.OpenStore(ctx, &o.cfg)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("--store %s: %w", o.cfg.Store, err)
	}
	return kubehttp.Open(rc, nil, kube.Options{Kubeconfig: path, Prefix: o.cfg.Prefix})
}

func (o *ipamOptions) prefix() string {
	if o.cfg.Prefix != "" {
		return o.cfg.Prefix
	}
	return ipam.DefaultPrefix
}

func newIPAMCommand(opts *globalOptions) *cobra.Command {
	o := &ipamOptions{}
	cmd := &cobra.Command{Use: "ipam", Short: "Inspect and repair the block IPAM: pools, blocks, leaks"}
	f := cmd.PersistentFlags()
	f.StringVar(&o.cfg.Store, "store", ipamcni.DefaultStore, "bolt:PATH or etcd://HOST:PORT[,HOST:PORT]")
	f.StringVar(&o.cfg.EtcdCertFile, "etcd-cert", "", "etcd client certificate")
	f.StringVar(&o.cfg.EtcdKeyFile, "etcd-key", "", "etcd client key")
	f.StringVar(&o.cfg.EtcdCAFile, "etcd-ca", "", "etcd CA certificate")
	f.StringVar(&o.cfg.Prefix, "prefix", "", "store key prefix (default "+ipam.DefaultPrefix+")")
	cmd.AddCommand(o.showCommand(), o.checkCommand(opts), o.releaseCommand(), o.poolCommand(), o.nodeCommand(), o.migrateCommand())
	return cmd
}

// ipamSummary is `ipam show -o json`.
type ipamSummary struct {
	Pools []poolSummary `json:"pools"`
	// Invalid: the pools skipped because their stored value is invalid.
	Invalid   []string         `json:"invalid,omitempty"`
	Blocks    []ipam.BlockInfo `json:"blocks,omitempty"`
	Allocated int              `json:"allocated"`
}

type poolSummary struct {
	ipam.Pool
	Blocks    int `json:"blocks"`
	Allocated int `json:"allocated"`
	Capacity  int `json:"capacity"` // addresses in claimed blocks
}

func (o *ipamOptions) showCommand() *cobra.Command {
	var blocks bool
	var output string
	cmd := &cobra.Command{
		Use:   "show",
		Short: "Pools and their use; --blocks lists every block with its node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.with(cmd, func(a *ipam.Allocator) error {
				pools, invalid, err := a.Pools(cmd.Context())
				if err != nil {
					return err
				}
				bs, err := a.Blocks(cmd.Context())
				if err != nil {
					return err
				}
				sum := summarize(pools, bs)
				for _, bad := range invalid {
					sum.Invalid = append(sum.Invalid, bad.Error())
				}
				if blocks {
					sum.Blocks = bs
				}
				if output == "json" {
					return printJSON(cmd, sum)
				}
				return printSummary(cmd.OutOrStdout(), sum, blocks)
			})
		},
	}
	cmd.Flags().BoolVar(&blocks, "blocks", false, "list every block with its node and use")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	return cmd
}

// summarize counts each pool's blocks and addresses.
func summarize(pools []ipam.Pool, blocks []ipam.BlockInfo) ipamSummary {
	sum := ipamSummary{}
	for _, p := range pools {
		ps := poolSummary{Pool: p}
		for _, b := range blocks {
			if b.Pool == p.Name {
				ps.Blocks++
				ps.Allocated += b.Allocated
				ps.Capacity += b.Size
			}
		}
		sum.Allocated += ps.Allocated
		sum.Pools = append(sum.Pools, ps)
	}
	return sum
}

// printSummary prints the pools, and with blocks the summary's blocks.
func printSummary(out io.Writer, sum ipamSummary, blocks bool) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "POOL\tCIDR\tBLOCK SIZE\tBLOCKS\tALLOCATED\tIN BLOCKS\tSELECTOR\tSTATE")
	for _, p := range sum.Pools {
		state := "enabled"
		if p.Disabled {
			state = "disabled"
		}
		fmt.Fprintf(w, "%s\t%s\t/%d\t%d\t%d\t%d\t%s\t%s\n", p.Name, p.CIDR, p.BlockSize, p.Blocks, p.Allocated, p.Capacity, orDash(p.NodeSelector), state)
	}
	for _, bad := range sum.Invalid {
		fmt.Fprintf(w, "invalid: %s\n", bad)
	}
	if blocks {
		fmt.Fprintln(w, "\nBLOCK\tNODE\tPOOL\tALLOCATED\tSIZE")
		for _, b := range sum.Blocks {
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\n", b.CIDR, orDash(b.Node), orDash(b.Pool), b.Allocated, b.Size)
		}
	}
	return w.Flush()
}

func (o *ipamOptions) checkCommand(opts *globalOptions) *cobra.Command {
	var output, node string
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Report inconsistencies: addresses with two owners or not found from their node, index mismatches, and leaks",
		Long: `check reads every node index and block and reports addresses owned twice,
addresses their node's index does not name (unindexed) or, borrowed, does
not publish for routes (unpublished), index entries that disagree with their
block or have been in flight too long, undecodable values, and pools
skipped because their stored value is invalid. Addresses
allocated for a workload endpoint that a newer sandbox of the pod took over
are reported as leaked. With --node, only that node's index and blocks are
read, and its addresses whose attachment is not in this machine's CNI result
cache (--cache-dir) are reported as leaked too. It exits 1 when it finds
anything; -o json writes a report that 'podnet ipam release --from-report'
accepts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.with(cmd, func(a *ipam.Allocator) error {
				// Endpoints tell live addresses from leaked ones cluster-wide;
				// --node adds this machine's CNI cache for its own addresses.
				copts := ipam.CheckOptions{Endpoints: true}
				var rep ipam.Report
				var err error
				if node != "" {
					var live map[string]bool
					if live, err = liveHandles(opts); err != nil {
						return err
					}
					copts.Live = func(n, h string) bool { return n != node || live[h] || strings.Contains(h, ".gateway.") }
					rep, err = a.CheckNode(cmd.Context(), node, copts)
				} else {
					rep, err = a.Check(cmd.Context(), copts)
				}
				if err != nil {
					return err
				}
				if output == "json" {
					if err := printJSON(cmd, rep); err != nil {
						return err
					}
				} else {
					printReport(cmd, rep)
				}
				if !rep.Clean() {
					return exitCode(1)
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	cmd.Flags().StringVar(&node, "node", "", "also report this node's addresses that no cached attachment here explains")
	return cmd
}

// liveHandles are the IPAM handles of this machine's cached attachments.
func liveHandles(opts *globalOptions) (map[string]bool, error) {
	atts, err := opts.runtime().CachedAttachments("", "")
	if err != nil {
		return nil, err
	}
	live := map[string]bool{}
	for _, at := range atts {
		live[ipamcni.Handle(at.Network, at.ContainerID)] = true
	}
	return live, nil
}

func printReport(cmd *cobra.Command, rep ipam.Report) {
	out := cmd.OutOrStdout()
	if rep.Clean() {
		fmt.Fprintln(out, "ipam: clean")
		return
	}
	for _, l := range rep.Leaked {
		fmt.Fprintf(out, "leaked: %s (block %s, node %s, handle %s)\n", l.Addr, l.Block, l.Node, l.Handle)
	}
	for _, l := range rep.MultipleOwners {
		fmt.Fprintf(out, "multiple owners: %s (block %s, handle %s)\n", l.Addr, l.Block, l.Handle)
	}
	for _, l := range rep.Unindexed {
		fmt.Fprintf(out, "unindexed: %s (block %s, handle %s): node %s's index does not name the block\n", l.Addr, l.Block, l.Handle, l.Node)
	}
	for _, l := range rep.Unpublished {
		fmt.Fprintf(out, "unpublished: %s (block %s, handle %s): borrowed by node %s, not routed to it\n", l.Addr, l.Block, l.Handle, l.Node)
	}
	for _, m := range rep.AffinityMismatches {
		fmt.Fprintf(out, "index mismatch: node %s block %s: %s\n", m.Node, m.Block, m.Problem)
	}
	for _, c := range rep.Corrupt {
		fmt.Fprintf(out, "corrupt: %s\n", c)
	}
}

func (o *ipamOptions) releaseCommand() *cobra.Command {
	var ips, handles []string
	var report, node string
	cmd := &cobra.Command{
		Use:   "release",
		Short: "Release addresses by address, by handle, or every leak of a check report",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(ips)+len(handles) == 0 && report == "" {
				return errors.New("give --ip, --handle or --from-report")
			}
			var leaked [][2]string // node, handle
			for _, h := range handles {
				leaked = append(leaked, [2]string{node, h})
			}
			if report != "" {
				data, err := os.ReadFile(report)
				if err != nil {
					return err
				}
				var rep ipam.Report
				if err := json.Unmarshal(data, &rep); err != nil {
					return fmt.Errorf("%s: not a check report: %v", report, err)
				}
				seen := map[string]bool{}
				for _, l := range rep.Leaked {
					if !seen[l.Node+"/"+l.Handle] {
						seen[l.Node+"/"+l.Handle] = true
						leaked = append(leaked, [2]string{l.Node, l.Handle})
					}
				}
			}
			return o.with(cmd, func(a *ipam.Allocator) error {
				var errs []error
				for _, nh := range leaked {
					if err := a.ReleaseByHandle(cmd.Context(), nh[0], nh[1]); err != nil {
						errs = append(errs, err)
						continue
					}
					fmt.Fprintf(cmd.OutOrStdout(), "released handle %s\n", nh[1])
				}
				var addrs []netip.Addr
				for _, s := range ips {
					ip, err := netip.ParseAddr(s)
					if err != nil {
						return cni.Errorf(cni.CodeInvalidNetworkConfig, "--ip %q is not an address", s)
					}
					addrs = append(addrs, ip)
				}
				if len(addrs) > 0 {
					released, err := a.ReleaseIPs(cmd.Context(), addrs)
					if err != nil {
						errs = append(errs, err)
					}
					for _, r := range released {
						fmt.Fprintf(cmd.OutOrStdout(), "released %s\n", r)
					}
				}
				return errors.Join(errs...)
			})
		},
	}
	cmd.Flags().StringArrayVar(&ips, "ip", nil, "address to release (repeatable)")
	cmd.Flags().StringArrayVar(&handles, "handle", nil, "handle whose addresses to release (repeatable)")
	cmd.Flags().StringVar(&node, "node", "", "the node of the --handle addresses (read its index only; without it, every block is read)")
	cmd.Flags().StringVar(&report, "from-report", "", "release every leaked handle of a 'podnet ipam check -o json' report")
	return cmd
}

func (o *ipamOptions) poolCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "pool", Short: "Manage address pools"}
	var blockSize int
	var selector string
	var disabled bool
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
				return a.PutPool(cmd.Context(), ipam.Pool{Name: args[0], CIDR: cidr, BlockSize: blockSize, NodeSelector: selector, Disabled: disabled})
			})
		},
	}
	add.Flags().IntVar(&blockSize, "block-size", 0, "block prefix length (default /26 for IPv4, /122 for IPv6)")
	add.Flags().StringVar(&selector, "node-selector", "", "nodes that may take blocks from the pool")
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
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "NAME\tCIDR\tBLOCK SIZE\tSELECTOR\tDISABLED")
				for _, p := range pools {
					fmt.Fprintf(w, "%s\t%s\t/%d\t%s\t%v\n", p.Name, p.CIDR, p.BlockSize, orDash(p.NodeSelector), p.Disabled)
				}
				for _, bad := range invalid {
					fmt.Fprintf(w, "invalid: %s\n", bad)
				}
				return w.Flush()
			})
		},
	}
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
				if res.Done {
					fmt.Fprintf(cmd.OutOrStdout(), "already migrated: %s holds the layout marker\n", o.prefix())
					return nil
				}
				fmt.Fprintf(cmd.OutOrStdout(), "migrated %s to %s: %d pools, %d blocks, %d node indexes (%d keys there already)\n",
					from, o.prefix(), res.Pools, res.Blocks, res.Nodes, res.Existing)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&from, "from", from, "key prefix of the layout v1 data")
	return cmd
}
