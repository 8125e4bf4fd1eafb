package execcost

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/podnet/podnet/bench"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netplugin"
)

// floorChain is one network bench measures in BenchmarkWorkloadFloor.
type floorChain struct {
	name  string
	opts  bench.Options
	rates []float64 // pods/s at parallel=10, one per iteration
	cpu   []float64 // ms of CPU a pod, the runtime's side included
}

// BenchmarkWorkloadFloor: podnet bench's workload (100 pods one at a
// time, then 100 ten at a time, through the plugin manager) on the
// plugins that do the least, the chains taking turns: noop (an exec that
// does nothing), vethfloor (the kernel's least for a routed veth) and
// podnet as podnet install writes it, without and with a host port per
// pod. It bounds what the 2-core goal of 120 pods/s at parallel=10 can
// mean on the machine: no exec'd plugin is faster than vethfloor.
// PODNET_FLOOR_PODS changes the pods per phase.
func BenchmarkWorkloadFloor(b *testing.B) {
	testutil.RequireRoot(b)
	pods := 100
	if v := os.Getenv("PODNET_FLOOR_PODS"); v != "" {
		if _, err := fmt.Sscan(v, &pods); err != nil || pods < 1 {
			b.Fatalf("PODNET_FLOOR_PODS=%q: a number of pods, at least 1", v)
		}
	}
	chains := floorChains(b, pods)
	for b.Loop() {
		for _, c := range chains {
			rate, cpu := runFloor(b, c.opts)
			c.rates, c.cpu = append(c.rates, rate), append(c.cpu, cpu)
		}
	}
	for _, c := range chains {
		b.ReportMetric(median(c.rates), c.name+"-pods/s")
		b.ReportMetric(median(c.cpu), c.name+"-cpu-ms/pod")
	}
}

// floorChains writes each chain's network and plugins into temporary
// directories.
func floorChains(b *testing.B, pods int) []*floorChain {
	work := b.TempDir()
	floorBin := filepath.Join(work, "floor-bin")
	floorConf := filepath.Join(work, "floor-net.d")
	for _, d := range []string{floorBin, floorConf} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	for _, name := range []string{"noop", "vethfloor"} {
		if err := os.Rename(build(b, "./internal/execcost/testdata/"+name, false), filepath.Join(floorBin, name)); err != nil {
			b.Fatal(err)
		}
		conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"plugins":[{"type":%q}]}`, name, name)
		if err := os.WriteFile(filepath.Join(floorConf, "10-"+name+".conflist"), []byte(conf), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	podnetConf, podnetBin := installPodnet(b, work)
	opts := func(conf, bin, network string, ports int) bench.Options {
		return bench.Options{ConfDir: conf, Network: network, BinDirs: []string{bin}, CacheDir: filepath.Join(work, "cache-"+network),
			Pods: pods, Parallel: 10, HostPortBase: ports, Loopback: netplugin.LoopbackInProcess}
	}
	return []*floorChain{
		{name: "noop", opts: opts(floorConf, floorBin, "noop", 0)},
		{name: "vethfloor", opts: opts(floorConf, floorBin, "vethfloor", 0)},
		{name: "podnet-noports", opts: opts(podnetConf, podnetBin, "podnet", 0)},
		{name: "podnet", opts: opts(podnetConf, podnetBin, "podnet", 20000)},
	}
}

// installPodnet builds podnet as make build does and installs it with
// podnet install, its store a bolt file in work.
func installPodnet(b *testing.B, work string) (confDir, binDir string) {
	src := filepath.Join(work, "podnet-src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		b.Fatal(err)
	}
	for _, p := range []string{"podnet", "podnet-ipam", "podnet-portmap", "loopback"} {
		if err := os.Rename(build(b, "./plugins/"+p, false), filepath.Join(src, p)); err != nil {
			b.Fatal(err)
		}
	}
	confDir, binDir = filepath.Join(work, "podnet-net.d"), filepath.Join(work, "podnet-bin")
	cmd := exec.Command(build(b, "./cmd/podnet", false), "install", "--conf-dir", confDir, "--bin-dir", binDir, "--src-dir", src,
		"--store", "bolt:"+filepath.Join(work, "ipam.db"), "--node", "bench", "--pool", "10.244.0.0/16")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("podnet install: %v\n%s", err, out)
	}
	return confDir, binDir
}

// runFloor runs the workload once and returns the parallel phase's pods
// a second and the CPU a pod took in both phases: this process's (the
// runtime's side: the plugin manager, its cache) and its children's
// (the plugins).
func runFloor(b *testing.B, o bench.Options) (rate, cpuMs float64) {
	before := cpuTime(b)
	phases, err := bench.Run(context.Background(), o)
	if err != nil {
		b.Fatalf("%s: %v", o.Network, err)
	}
	cpu := cpuTime(b) - before
	return phases[len(phases)-1].PodsPerSecond(), float64(cpu) / float64(time.Millisecond) / float64(bench.Phases*o.Pods)
}

func cpuTime(b *testing.B) time.Duration {
	var total time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if err := syscall.Getrusage(who, &ru); err != nil {
			b.Fatal(err)
		}
		total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return total
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
