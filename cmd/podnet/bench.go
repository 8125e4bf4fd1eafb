package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/podnet/podnet/bench"
	"github.com/podnet/podnet/netplugin"
)

type benchOptions struct {
	pods, parallel int
	rounds         int
	network        string
	compareBin     string
	noPorts        bool
	policy         string
	output         string
}

func newBenchCommand(opts *globalOptions) *cobra.Command {
	bo := &benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure pod network set-up and tear-down through the plugin manager",
		Long: `bench sets up and tears down --pods pod sandboxes through the plugin manager,
one at a time and then --parallel at a time, and prints ADD and DEL latency
percentiles and pods per second. Each pod gets one host port mapping.

Everything runs inside network namespaces bench creates (plugins run in a
private "host" namespace), so it never changes this machine's network.

With --compare-bin DIR it runs the same workload on the reference chain
(bridge + host-local with ipMasq + portmap, and loopback, from DIR) in the
same run and prints the ratios. podnet's pods get lo the way --loopback
says (in process by default); the reference's always from DIR's loopback
plugin, as upstream runtimes do by default. --loopback plugin measures
podnet with the loopback plugin exec'd too.

With --rounds N it measures N times, podnet and the reference taking
turns, prints each round's medians and then, figure by figure, the median
over the rounds: on a shared machine whole runs drift, and taking turns
keeps the drift out of the ratios.

With --policy selected (or unselected) it also measures podnet with the
node's NetworkPolicy service beside it, the agent's own code fed a
cluster of bench's pods (each deleted once its DEL is done, as the API
server does after a kubelet's tear-down): the network names the
service's socket (policySocket), so every ADD waits for the first-packet
handshake, and a NetworkPolicy selects every pod (or, unselected, none
of them while its namespace has one). The chain "podnet+policy" is
printed beside podnet, with the difference of their latencies.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return bo.run(cmd, opts) },
	}
	f := cmd.Flags()
	f.IntVar(&bo.pods, "pods", 100, "pods per phase")
	f.IntVar(&bo.parallel, "parallel", 10, "pods at a time in the parallel phase")
	f.IntVar(&bo.rounds, "rounds", 1, "measure this many times, chains taking turns, and report the medians")
	f.StringVar(&bo.network, "network", "", "podnet network to measure (default: the first in the conf dir)")
	f.StringVar(&bo.compareBin, "compare-bin", "", "directory with the reference plugins to compare against")
	f.BoolVar(&bo.noPorts, "no-ports", false, "map no host ports")
	f.StringVar(&bo.policy, "policy", "", "also measure podnet with the node's policy service: selected or unselected")
	addOutputFlag(cmd, &bo.output, outputTable, outputJSON)
	registerValues(cmd, "policy", policySelected, policyUnselected)
	return cmd
}

// referenceChain is the upstream chain podnet is compared with.
const referenceChain = `{
  "cniVersion": "1.0.0",
  "name": "reference",
  "plugins": [
    {"type": "bridge", "bridge": "pnref0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.250.0.0/16"}]], "dataDir": %q}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}`

// benchChain is one network measured: podnet's, or the reference.
type benchChain struct {
	name string
	opts bench.Options
}

func (bo *benchOptions) run(cmd *cobra.Command, opts *globalOptions) error {
	if bo.pods < 1 || bo.parallel < 1 || bo.rounds < 1 {
		return fmt.Errorf("--pods, --parallel and --rounds must be at least 1")
	}
	switch bo.policy {
	case policyOff, policySelected, policyUnselected:
	default:
		return fmt.Errorf("--policy %q: selected or unselected", bo.policy)
	}
	work, err := os.MkdirTemp("", "podnet-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	chains, err := bo.chains(opts, work)
	if err != nil {
		return err
	}
	results, err := bo.measure(cmd, chains)
	if err != nil {
		return err
	}
	if bo.output == outputJSON {
		return writeJSON(cmd.OutOrStdout(), bo.jsonReport(opts, chains, results))
	}
	bo.report(cmd.OutOrStdout(), opts, chains, results)
	return nil
}

// chains are podnet's network and, with --compare-bin, the reference
// chain, written into work.
func (bo *benchOptions) chains(opts *globalOptions, work string) ([]benchChain, error) {
	hostPorts := 20000
	if bo.noPorts {
		hostPorts = 0
	}
	chains := []benchChain{{"podnet", bench.Options{
		ConfDir: opts.confDir, Network: bo.network, BinDirs: opts.binDirs, CacheDir: filepath.Join(work, "cache-podnet"),
		Pods: bo.pods, Parallel: bo.parallel, HostPortBase: hostPorts,
		Loopback: netplugin.LoopbackMode(opts.loopback),
	}}}
	if bo.policy != policyOff {
		o := chains[0].opts
		o.ConfDir = filepath.Join(work, "policy-net.d")
		o.CacheDir = filepath.Join(work, "cache-policy")
		bp := &benchPolicy{mode: bo.policy, pods: bo.pods, socket: filepath.Join(work, "policy.sock")}
		if err := withPolicySocket(opts.confDir, bo.network, o.ConfDir, bp.socket); err != nil {
			return nil, err
		}
		o.Host, o.Gone = bp.start, bp.gone
		chains = append(chains, benchChain{"podnet+policy", o})
	}
	if bo.compareBin == "" {
		return chains, nil
	}
	refConf := filepath.Join(work, "ref-net.d")
	if err := os.MkdirAll(refConf, 0o755); err != nil {
		return nil, err
	}
	doc := fmt.Sprintf(referenceChain, filepath.Join(work, "ref-ipam"))
	if err := os.WriteFile(filepath.Join(refConf, "10-reference.conflist"), []byte(doc), 0o644); err != nil {
		return nil, err
	}
	return append(chains, benchChain{"reference", bench.Options{
		ConfDir: refConf, BinDirs: []string{bo.compareBin}, CacheDir: filepath.Join(work, "cache-ref"),
		Pods: bo.pods, Parallel: bo.parallel, HostPortBase: hostPorts,
		// The upstream way: the reference loopback plugin, exec'd.
		Loopback: netplugin.LoopbackPlugin,
	}}), nil
}

// measure runs every round, the chains taking turns; results[c][r] are
// chain c's phases in round r.
func (bo *benchOptions) measure(cmd *cobra.Command, chains []benchChain) ([][][]bench.Phase, error) {
	results := make([][][]bench.Phase, len(chains))
	for r := range bo.rounds {
		for c, ch := range chains {
			round := ""
			if bo.rounds > 1 {
				round = fmt.Sprintf(" (round %d of %d)", r+1, bo.rounds)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "podnet bench: %s%s: %d pods sequentially, then %d at a time...\n", ch.name, round, bo.pods, bo.parallel)
			phases, err := bench.Run(cmd.Context(), ch.opts)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", ch.name, err)
			}
			results[c] = append(results[c], phases)
		}
	}
	return results, nil
}

// report prints the rounds (when there are several) and the medians.
func (bo *benchOptions) report(out io.Writer, opts *globalOptions, chains []benchChain, results [][][]bench.Phase) {
	summary := make([][]bench.Phase, len(results))
	for c := range results {
		summary[c] = bench.MedianOf(results[c])
	}
	fmt.Fprintf(out, "lo: podnet %s", opts.loopback)
	if bo.compareBin != "" {
		fmt.Fprintf(out, ", reference %s", netplugin.LoopbackPlugin)
	}
	if bo.policy != policyOff {
		fmt.Fprintf(out, "; podnet+policy: the policy service, %s pods", bo.policy)
	}
	fmt.Fprintln(out)
	if bo.rounds > 1 {
		printRounds(out, chains, results)
		fmt.Fprintf(out, "\nmedian of %d rounds:\n", bo.rounds)
	}
	printBench(out, chains, summary)
}

// printRounds prints the ADD and DEL medians of every round, one line per
// round and phase, chains side by side.
func printRounds(out io.Writer, chains []benchChain, results [][][]bench.Phase) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	head := "round\tphase\t"
	for _, ch := range chains {
		head += ch.name + " ADD p50 ms\tDEL p50 ms\t"
	}
	fmt.Fprintln(w, head)
	for r := range results[0] {
		for i, p := range results[0][r] {
			line := fmt.Sprintf("%d\t%s\t", r+1, p.Name)
			for c := range chains {
				if i < len(results[c][r]) {
					q := results[c][r][i]
					line += fmt.Sprintf("%s\t%s\t", ms(q.Add.P50), ms(q.Del.P50))
				}
			}
			fmt.Fprintln(w, line)
		}
	}
	w.Flush()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

// printBench prints every chain's phases, then each other chain against
// podnet (chains[0]): the reference as a ratio (how many times podnet's
// time it takes), podnet+policy as a difference in milliseconds (what
// the policy service adds to podnet's).
func printBench(out io.Writer, chains []benchChain, summary [][]bench.Phase) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "chain\tphase\tADD p50 ms\tp90\tp99\tDEL p50 ms\tp90\tp99\tpods/s\t")
	for c, ch := range chains {
		for _, p := range summary[c] {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t\n", ch.name, p.Name, ms(p.Add.P50), ms(p.Add.P90), ms(p.Add.P99),
				ms(p.Del.P50), ms(p.Del.P90), ms(p.Del.P99), p.PodsPerSecond())
		}
	}
	podnet := summary[0]
	for c := 1; c < len(chains); c++ {
		for i := range min(len(podnet), len(summary[c])) {
			p, r := podnet[i], summary[c][i]
			if chains[c].name == "reference" {
				ratio := func(a, b time.Duration) string {
					if a <= 0 {
						return "-"
					}
					return fmt.Sprintf("%.1fx", float64(b)/float64(a))
				}
				fmt.Fprintf(w, "reference/podnet\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.1fx\t\n", p.Name,
					ratio(p.Add.P50, r.Add.P50), ratio(p.Add.P90, r.Add.P90), ratio(p.Add.P99, r.Add.P99),
					ratio(p.Del.P50, r.Del.P50), ratio(p.Del.P90, r.Del.P90), ratio(p.Del.P99, r.Del.P99),
					p.PodsPerSecond()/max(r.PodsPerSecond(), 1e-9))
				continue
			}
			diff := func(a, b time.Duration) string { return fmt.Sprintf("%+.2f", float64(b-a)/float64(time.Millisecond)) }
			fmt.Fprintf(w, "%s - podnet\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%+.1f\t\n", chains[c].name, p.Name,
				diff(p.Add.P50, r.Add.P50), diff(p.Add.P90, r.Add.P90), diff(p.Add.P99, r.Add.P99),
				diff(p.Del.P50, r.Del.P50), diff(p.Del.P90, r.Del.P90), diff(p.Del.P99, r.Del.P99),
				r.PodsPerSecond()-p.PodsPerSecond())
		}
	}
	w.Flush()
}
