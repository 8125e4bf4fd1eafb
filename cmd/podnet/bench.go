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
)

type benchOptions struct {
	pods, parallel int
	network        string
	compareBin     string
	noPorts        bool
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
same run and prints the ratios.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return bo.run(cmd, opts) },
	}
	f := cmd.Flags()
	f.IntVar(&bo.pods, "pods", 100, "pods per phase")
	f.IntVar(&bo.parallel, "parallel", 10, "pods at a time in the parallel phase")
	f.StringVar(&bo.network, "network", "", "podnet network to measure (default: the first in the conf dir)")
	f.StringVar(&bo.compareBin, "compare-bin", "", "directory with the reference plugins to compare against")
	f.BoolVar(&bo.noPorts, "no-ports", false, "map no host ports")
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

func (bo *benchOptions) run(cmd *cobra.Command, opts *globalOptions) error {
	if bo.pods < 1 || bo.parallel < 1 {
		return fmt.Errorf("--pods and --parallel must be at least 1")
	}
	work, err := os.MkdirTemp("", "podnet-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	hostPorts := 20000
	if bo.noPorts {
		hostPorts = 0
	}
	type run struct {
		name   string
		phases []bench.Phase
	}
	var runs []run
	measure := func(name string, o bench.Options) error {
		fmt.Fprintf(cmd.ErrOrStderr(), "podnet bench: %s: %d pods sequentially, then %d at a time...\n", name, bo.pods, bo.parallel)
		phases, err := bench.Run(cmd.Context(), o)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		runs = append(runs, run{name, phases})
		return nil
	}
	err = measure("podnet", bench.Options{
		ConfDir: opts.confDir, Network: bo.network, BinDirs: opts.binDirs, CacheDir: filepath.Join(work, "cache-podnet"),
		Pods: bo.pods, Parallel: bo.parallel, HostPortBase: hostPorts,
	})
	if err != nil {
		return err
	}
	if bo.compareBin != "" {
		refConf := filepath.Join(work, "ref-net.d")
		if err := os.MkdirAll(refConf, 0o755); err != nil {
			return err
		}
		doc := fmt.Sprintf(referenceChain, filepath.Join(work, "ref-ipam"))
		if err := os.WriteFile(filepath.Join(refConf, "10-reference.conflist"), []byte(doc), 0o644); err != nil {
			return err
		}
		err = measure("reference", bench.Options{
			ConfDir: refConf, BinDirs: []string{bo.compareBin}, CacheDir: filepath.Join(work, "cache-ref"),
			Pods: bo.pods, Parallel: bo.parallel, HostPortBase: hostPorts,
		})
		if err != nil {
			return err
		}
	}
	printBench(cmd.OutOrStdout(), runs[0].phases, func() []bench.Phase {
		if len(runs) > 1 {
			return runs[1].phases
		}
		return nil
	}())
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

func printBench(out io.Writer, podnet, ref []bench.Phase) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "chain\tphase\tADD p50 ms\tp90\tp99\tDEL p50 ms\tp90\tp99\tpods/s\t")
	row := func(name string, p bench.Phase) {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t\n", name, p.Name, ms(p.Add.P50), ms(p.Add.P90), ms(p.Add.P99), ms(p.Del.P50), ms(p.Del.P90), ms(p.Del.P99), p.PodsPerSecond())
	}
	for _, p := range podnet {
		row("podnet", p)
	}
	for _, p := range ref {
		row("reference", p)
	}
	for i := range min(len(podnet), len(ref)) {
		ratio := func(a, b time.Duration) string {
			if a <= 0 {
				return "-"
			}
			return fmt.Sprintf("%.1fx", float64(b)/float64(a))
		}
		p, r := podnet[i], ref[i]
		fmt.Fprintf(w, "reference/podnet\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.1fx\t\n", p.Name,
			ratio(p.Add.P50, r.Add.P50), ratio(p.Add.P90, r.Add.P90), ratio(p.Add.P99, r.Add.P99),
			ratio(p.Del.P50, r.Del.P50), ratio(p.Del.P90, r.Del.P90), ratio(p.Del.P99, r.Del.P99),
			p.PodsPerSecond()/max(r.PodsPerSecond(), 1e-9))
	}
	w.Flush()
}
