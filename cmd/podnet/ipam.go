package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"

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
				if output == outputJSON {
					return writeJSON(cmd.OutOrStdout(), sum)
				}
				return printSummary(cmd.OutOrStdout(), sum, blocks)
			})
		},
	}
	cmd.Flags().BoolVar(&blocks, "blocks", false, "list every block with its node and use")
	addOutputFlag(cmd, &output, outputTable, outputJSON)
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
				if output == outputJSON {
					if err := writeJSON(cmd.OutOrStdout(), rep); err != nil {
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
	addOutputFlag(cmd, &output, outputTable, outputJSON)
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

// releaseReport is `ipam release -o json`: what was released, and the
// errors of what could not be (exit status 1 then).
type releaseReport struct {
	Handles   []string `json:"handles"`
	Addresses []string `json:"addresses"`
	Errors    []string `json:"errors"`
}

func (r releaseReport) writeText(w io.Writer) error {
	for _, h := range r.Handles {
		fmt.Fprintf(w, "released handle %s\n", h)
	}
	for _, a := range r.Addresses {
		fmt.Fprintf(w, "released %s\n", a)
	}
	return nil
}

func (o *ipamOptions) releaseCommand() *cobra.Command {
	var ips, handles []string
	var report, node, output string
	cmd := &cobra.Command{
		Use:   "release",
		Short: "Release addresses by address, by handle, or every leak of a check report",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(ips)+len(handles) == 0 && report == "" {
				return errors.New("give --ip, --handle or --from-report")
			}
			var addrs []netip.Addr
			for _, s := range ips {
				ip, err := netip.ParseAddr(s)
				if err != nil {
					return cni.Errorf(cni.CodeInvalidNetworkConfig, "--ip %q is not an address", s)
				}
				addrs = append(addrs, ip)
			}
			leaked, err := releaseHandles(node, handles, report)
			if err != nil {
				return err
			}
			return o.with(cmd, func(a *ipam.Allocator) error {
				rep, errs := release(cmd.Context(), a, leaked, addrs)
				return errors.Join(writeOutput(cmd.OutOrStdout(), output, rep), errors.Join(errs...))
			})
		},
	}
	cmd.Flags().StringArrayVar(&ips, "ip", nil, "address to release (repeatable)")
	cmd.Flags().StringArrayVar(&handles, "handle", nil, "handle whose addresses to release (repeatable)")
	cmd.Flags().StringVar(&node, "node", "", "the node of the --handle addresses (read its index only; without it, every block is read)")
	cmd.Flags().StringVar(&report, "from-report", "", "release every leaked handle of a 'podnet ipam check -o json' report")
	addOutputFlag(cmd, &output, outputText, outputJSON)
	return cmd
}

// releaseHandles are the node and handle pairs to release: the --handle
// ones on --node, and every leaked one of the report at path.
func releaseHandles(node string, handles []string, path string) ([][2]string, error) {
	var leaked [][2]string
	for _, h := range handles {
		leaked = append(leaked, [2]string{node, h})
	}
	if path == "" {
		return leaked, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rep ipam.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		return nil, fmt.Errorf("%s: not a check report: %v", path, err)
	}
	seen := map[string]bool{}
	for _, l := range rep.Leaked {
		if !seen[l.Node+"/"+l.Handle] {
			seen[l.Node+"/"+l.Handle] = true
			leaked = append(leaked, [2]string{l.Node, l.Handle})
		}
	}
	return leaked, nil
}

// release releases the handles and then the addresses, going on past
// errors.
func release(ctx context.Context, a *ipam.Allocator, leaked [][2]string, addrs []netip.Addr) (releaseReport, []error) {
	rep := releaseReport{Handles: []string{}, Addresses: []string{}}
	var errs []error
	for _, nh := range leaked {
		if err := a.ReleaseByHandle(ctx, nh[0], nh[1]); err != nil {
			errs = append(errs, err)
			continue
		}
		rep.Handles = append(rep.Handles, nh[1])
	}
	if len(addrs) > 0 {
		released, err := a.ReleaseIPs(ctx, addrs)
		if err != nil {
			errs = append(errs, err)
		}
		for _, r := range released {
			rep.Addresses = append(rep.Addresses, r.String())
		}
	}
	rep.Errors = errorStrings(errs)
	return rep, errs
}
