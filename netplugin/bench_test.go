package netplugin

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/internal/testutil"
)

// BenchmarkManagerOverhead sets up and tears down one pod (loopback and a
// one-plugin default network, both real executions) through the bare
// runtime and through PluginManager + the cni plugin, doing the same work
// in the same order. The difference is what the manager layer costs:
// per-pod lock, metrics, cache look-ups on tear-down, error wrapping.
func BenchmarkManagerOverhead(b *testing.B) {
	testutil.RequireRoot(b)
	binDir, cacheDir, confDir := b.TempDir(), b.TempDir(), b.TempDir()
	testutil.BuildBinary(b, "./plugins/loopback", binDir)
	testutil.BuildBinary(b, "./internal/testplugin", binDir)
	net := `{"cniVersion":"1.1.0","name":"bench","plugins":[{"type":"testplugin","ip":"10.88.0.5/24"}]}`
	if err := writeFile(confDir+"/10-bench.conflist", net); err != nil {
		b.Fatal(err)
	}
	_, nsPath := testutil.NewNetNS(b)
	// The plugins run in a namespace that models the node, never in the
	// machine's own; both sub-benchmarks pay the same for entering it.
	_, node := testutil.NewNodeNetNS(b)
	inNode := cni.WithExec(&cni.RawExec{HostNetNS: node})
	ctx := context.Background()
	pod := PodRef{Namespace: "bench", Name: "pod"}

	b.Run("runtime", func(b *testing.B) {
		rt := cni.NewRuntime([]string{binDir}, cni.WithCacheDir(cacheDir), inNode)
		list, err := cni.LoadFile(confDir + "/10-bench.conflist")
		if err != nil {
			b.Fatal(err)
		}
		lo := loopbackNetwork()
		// The same work the plugin does, loopback and the default network
		// at the same time, without the manager: locks, metrics, cache
		// look-ups and error wrapping are the difference.
		both := func(lo, def func() error) {
			done := make(chan error, 1)
			go func() { done <- lo() }()
			if err := def(); err != nil {
				b.Fatal(err)
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		}
		for i := 0; b.Loop(); i++ {
			id := fmt.Sprintf("sb%d", i)
			loConf := buildRuntimeConf(pod, id, nsPath, "lo")
			conf := buildRuntimeConf(pod, id, nsPath, "eth0")
			both(func() error { _, err := rt.AddNetworkList(ctx, lo, loConf); return err },
				func() error { _, err := rt.AddNetworkList(ctx, list, conf); return err })
			both(func() error { return rt.DelNetworkList(ctx, lo, loConf) },
				func() error { return rt.DelNetworkList(ctx, list, conf) })
		}
	})
	b.Run("manager", func(b *testing.B) {
		p := NewCNIPlugin(confDir, []string{binDir}, WithCacheDir(cacheDir), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), WithRuntimeOptions(inNode))
		if err := p.Init(InitConfig{Host: HostFunc(func(string) (string, error) { return nsPath, nil })}); err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		pm, err := NewPluginManager(p, nil)
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; b.Loop(); i++ {
			id := fmt.Sprintf("sb%d", i)
			if _, err := pm.SetUpPod(ctx, pod, id, nil); err != nil {
				b.Fatal(err)
			}
			if err := pm.TearDownPod(ctx, pod, id); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func writeFile(path, body string) error { return os.WriteFile(path, []byte(body), 0o644) }
