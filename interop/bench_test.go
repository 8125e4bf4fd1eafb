package interop

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// chain3 is three distinct plugin types, all the noop plugin, so that
// what is measured is the runtime: finding each binary, building each
// plugin's configuration with prevResult, exec, parsing and converting
// results, writing and removing the cache entry.
const chain3 = `{"cniVersion":"1.1.0","name":"pnio-bench","plugins":[
  {"type":"noop1","capabilities":{"portMappings":true}},
  {"type":"noop2","someSetting":{"nested":[1,2,3]}},
  {"type":"noop3"}]}`

// BenchmarkChain3 measures one ADD and one DEL of a three-plugin chain,
// driven by podnet's runtime and by libcni, with the result cache in the
// test's temp dir (on disk unless TMPDIR says otherwise). Plugin process
// start-up dominates both; the difference is the runtime's own overhead,
// including podnet's cache write through a temp file and a rename (and an
// fsync when an entry is replaced), which libcni does not do. It needs
// no root: the noop plugin touches no namespace.
func BenchmarkChain3(b *testing.B) {
	benchChain3(b, b.TempDir)
}

// BenchmarkChain3Tmpfs is BenchmarkChain3 with the cache on tmpfs, where
// file writes cost least: what remains is exec, chaining and parsing.
func BenchmarkChain3Tmpfs(b *testing.B) {
	const shm = "/dev/shm"
	mounts, _ := os.ReadFile("/proc/mounts")
	if !strings.Contains(string(mounts), " "+shm+" tmpfs ") {
		b.Skip(shm + " is not a tmpfs")
	}
	benchChain3(b, func() string {
		dir, err := os.MkdirTemp(shm, "pnio-bench-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	})
}

func benchChain3(b *testing.B, cacheDir func() string) {
	path := []string{noopBinDir(b)}
	ctx := context.Background()
	a := attachment{
		ContainerID: "pnio-bench-ctr",
		NetNS:       "/proc/self/ns/net", // never entered by noop
		IfName:      "eth0",
		Args:        [][2]string{{"IgnoreUnknown", "true"}, {"K8S_POD_NAME", "bench"}},
		CapArgs:     map[string]any{"portMappings": []any{map[string]any{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}}},
	}
	for _, mk := range bothLibraries {
		r := mk(path, cacheDir(), nil)
		b.Run(r.String(), func(b *testing.B) {
			conf := []byte(chain3)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.add(ctx, conf, a); err != nil {
					b.Fatalf("ADD: %v", err)
				}
				if err := r.del(ctx, conf, a); err != nil {
					b.Fatalf("DEL: %v", err)
				}
			}
		})
	}
}

// BenchmarkChain3Interleaved alternates the two libraries iteration by
// iteration, so that both see the same machine: on a shared, noisy host
// it is the fairer comparison. It reports each library's time per ADD+DEL
// and their ratio (below 1: podnet is faster).
func BenchmarkChain3Interleaved(b *testing.B) {
	path := []string{noopBinDir(b)}
	ctx := context.Background()
	a := attachment{ContainerID: "pnio-bench-ctr", NetNS: "/proc/self/ns/net", IfName: "eth0"}
	conf := []byte(chain3)
	var rs []runner
	for _, mk := range bothLibraries {
		rs = append(rs, mk(path, b.TempDir(), nil))
	}
	var spent [2]time.Duration
	n := 0
	for b.Loop() {
		for i, r := range rs {
			start := time.Now()
			if _, err := r.add(ctx, conf, a); err != nil {
				b.Fatalf("%v ADD: %v", r, err)
			}
			if err := r.del(ctx, conf, a); err != nil {
				b.Fatalf("%v DEL: %v", r, err)
			}
			spent[i] += time.Since(start)
		}
		n++
	}
	b.ReportMetric(float64(spent[0].Nanoseconds())/float64(n), "podnet-ns/op")
	b.ReportMetric(float64(spent[1].Nanoseconds())/float64(n), "libcni-ns/op")
	b.ReportMetric(float64(spent[0])/float64(spent[1]), "podnet/libcni")
}
