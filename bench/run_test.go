package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/sandbox"
)

func TestRunLeavesNothing(t *testing.T) {
	testutil.RequireRoot(t)
	confDir, binDir, ipamDir := t.TempDir(), t.TempDir(), t.TempDir()
	for _, p := range []string{"./plugins/loopback", "./plugins/podnet", "./plugins/podnet-portmap", "./internal/testipamplugin"} {
		testutil.BuildBinary(t, p, binDir)
	}
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"benchnet","plugins":[
		{"type":"podnet","ipMasq":true,"ipam":{"type":"testipamplugin","dataDir":%q,"ranges":["10.104.0.0/24"]}},
		{"type":"podnet-portmap","capabilities":{"portMappings":true}}]}`, ipamDir)
	if err := os.WriteFile(filepath.Join(confDir, "10-benchnet.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cacheDir := t.TempDir()
	phases, err := Run(context.Background(), Options{ConfDir: confDir, BinDirs: []string{binDir}, CacheDir: cacheDir, Pods: 6, Parallel: 3, HostPortBase: 21000})
	if err != nil {
		t.Fatal(err)
	}
	if len(phases) != 2 || phases[0].Add.N != 6 || phases[1].Parallel != 3 || phases[1].Del.P50 <= 0 || phases[0].PodsPerSecond() <= 0 {
		t.Errorf("phases %+v", phases)
	}
	entries, _ := os.ReadDir(netns.RunDir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), sandbox.NamePrefix+"bench") {
			t.Errorf("namespace left: %s", e.Name())
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(cacheDir, "results")); len(entries) != 0 {
		t.Errorf("cache entries left: %v", entries)
	}
	if b, err := os.ReadFile(filepath.Join(ipamDir, "state.json")); err == nil && strings.Contains(string(b), "10.104.") {
		t.Errorf("addresses still allocated: %s", b)
	}
}
