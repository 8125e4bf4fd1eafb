package main

import (
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

	"github.com/podnet/podnet/agent"
	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/ipam"
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
	st, err := ipamcni.OpenStore(cmd.Context(), &o.cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	cfg := ipam.Config{}
	if o.cfg.Prefix != "" {
		cfg.Keys = ipam.Keys{Prefix: o.cfg.Prefix}
	}
	return fn(ipam.New(st, cfg), st)
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
	f.StringVar(&o.cfg.Prefix, "prefix", "", "store key prefix (default /podnet/v1/)")
	cmd.AddCommand(o.showCommand(), o.checkCommand(opts), o.releaseCommand(), o.poolCommand(), o.nodeCommand())
	return cmd
}

// ipamSummary is `ipam show -o json`.
type ipamSummary struct {
	Pools     []poolSummary    `json:"pools"`
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
				pools, err := a.Pools(cmd.Context())
				if err != nil {
					return err
				}
				bs, err := a.Blocks(cmd.Context())
				if err != nil {
					return err
				}
				sum := summarize(pools, bs)
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
		Short: "Report inconsistencies: addresses with two owners, dangling handles, affinity mismatches, and leaks",
		Long: `check reads every IPAM object at one revision and reports addresses owned
twice, handles that point at nothing, blocks whose affinity disagrees with
their block, and undecodable values. Addresses allocated for a workload
endpoint whose endpoint is gone or names another container are reported as
leaked. With --node, addresses of that node whose attachment is not in this
machine's CNI result cache (--cache-dir) are reported as leaked too. It exits 1 when it finds anything; -o json writes a
report that 'podnet ipam release --from-report' accepts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.with(cmd, func(a *ipam.Allocator) error {
				// Endpoints tell live addresses from leaked ones cluster-wide;
				// --node adds this machine's CNI cache for its own addresses.
				copts := ipam.CheckOptions{Endpoints: true}
				if node != "" {
					live, err := liveHandles(opts)
					if err != nil {
						return err
					}
					copts.Live = func(n, h string) bool { return n != node || live[h] || strings.Contains(h, ".gateway.") }
				}
				rep, err := a.Check(cmd.Context(), copts)
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
	for _, l := range rep.Orphans {
		fmt.Fprintf(out, "orphan: %s (block %s, handle %s has no record of it)\n", l.Addr, l.Block, l.Handle)
	}
	for _, d := range rep.DanglingHandles {
		fmt.Fprintf(out, "dangling handle: %s counts %d in %s, the block holds %d\n", d.Handle, d.Want, d.Block, d.Have)
	}
	for _, m := range rep.AffinityMismatches {
		fmt.Fprintf(out, "affinity mismatch: node %s block %s: %s\n", m.Node, m.Block, m.Problem)
	}
	for _, c := range rep.Corrupt {
		fmt.Fprintf(out, "corrupt: %s\n", c)
	}
}

func (o *ipamOptions) releaseCommand() *cobra.Command {
	var ips, handles []string
	var report string
	cmd := &cobra.Command{
		Use:   "release",
		Short: "Release addresses by address, by handle, or every leak of a check report",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(ips)+len(handles) == 0 && report == "" {
				return errors.New("give --ip, --handle or --from-report")
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
					if !seen[l.Handle] {
						seen[l.Handle] = true
						handles = append(handles, l.Handle)
					}
				}
			}
			return o.with(cmd, func(a *ipam.Allocator) error {
				var errs []error
				for _, h := range handles {
					if err := a.ReleaseByHandle(cmd.Context(), h); err != nil {
						errs = append(errs, err)
						continue
					}
					fmt.Fprintf(cmd.OutOrStdout(), "released handle %s\n", h)
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
				pools, err := a.Pools(cmd.Context())
				if err != nil {
					return err
				}
				sort.Slice(pools, func(i, j int) bool { return pools[i].Name < pools[j].Name })
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "NAME\tCIDR\tBLOCK SIZE\tSELECTOR\tDISABLED")
				for _, p := range pools {
					fmt.Fprintf(w, "%s\t%s\t/%d\t%s\t%v\n", p.Name, p.CIDR, p.BlockSize, orDash(p.NodeSelector), p.Disabled)
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
	cmd.AddCommand(&cobra.Command{
		Use:   "rm NODE",
		Short: "Remove a node: release its affinities and empty blocks, and delete its registration",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.withStore(cmd, func(a *ipam.Allocator, st ipam.Store) error {
				if err := a.RemoveNode(cmd.Context(), args[0]); err != nil {
					return err
				}
				// Without its record, every agent drops the node's routes
				// at once instead of when its lease would have expired.
				_, err := st.Txn(cmd.Context(), nil, []ipam.Op{ipam.Del(agent.NodeKey(o.prefix(), args[0]))})
				return err
			})
		},
	})
	return cmd
}
