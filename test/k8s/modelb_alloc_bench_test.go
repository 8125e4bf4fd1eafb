package k8s

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/agentsock"
	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// allocPool is BenchmarkModelBAllocations's pool.
const allocPool = "10.96.0.0/16"

// allocShapes are the waves' shapes, nodes x concurrent ADDs per node:
// design 4.4 items 2 (10 x 40) and 3 (1 x 40, 10 x 1: queueing on one
// node's block apart from the API's latency).
var allocShapes = [][2]int{{10, 40}, {1, 40}, {10, 1}}

// allocBench execs the real podnet-ipam plugin in the control plane's
// network namespace, where the API server is reachable, as a runtime on
// a node would.
type allocBench struct {
	c      *cluster.Cluster
	plugin string // the binary
	podNS  string // CNI_NETNS: a namespace of the bench's own, untouched by an IPAM plugin
	relDir string // ipam.releaseDir: a DEL that cannot release leaves a release record here
	// lockDir holds each node's ipam.nodeLock: the nodes are one machine
	// here, and must not share the default /run/podnet/ipam.lock.
	lockDir string
	// store returns node i's ipam.store spec.
	store func(i int) string
	// nodes names this run's nodes apart from the other runs', so that
	// each run's first wave claims its own blocks.
	nodes string
	// shape is nodes x concurrent ADDs per node.
	shape [2]int
}

// buildIPAMPlugin builds plugins/podnet-ipam from podnet's module,
// static, as make build and the image build it.
func buildIPAMPlugin(b *testing.B, c *cluster.Cluster) string {
	dst := filepath.Join(b.TempDir(), "podnet-ipam")
	cmd := exec.Command("go", "build", "-trimpath", "-o", dst, "./plugins/podnet-ipam")
	cmd.Dir = c.ModuleRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("go build ./plugins/podnet-ipam: %v\n%s", err, out)
	}
	return dst
}

func (a *allocBench) node(i int) string { return fmt.Sprintf("%s-node-%d", a.nodes, i) }

// netConf is the network configuration node i's runtime passes: a main
// plugin's, with podnet-ipam as its IPAM.
func (a *allocBench) netConf(i int) []byte {
	return fmt.Appendf(nil, `{"cniVersion":"1.1.0","name":"modelb","type":"bridge","ipam":{"type":"podnet-ipam","store":%q,"node":%q,"releaseDir":%q,"nodeLock":%q,"pools":[{"name":"bench","cidr":%q}]}}`,
		a.store(i), a.node(i), a.relDir, filepath.Join(a.lockDir, a.node(i)+".lock"), allocPool)
}

// exec runs one CNI verb for container id on node i and returns how
// long it took and what it printed.
func (a *allocBench) exec(verb string, i int, id string) (time.Duration, []byte, error) {
	cmd := exec.Command(a.plugin)
	cmd.Stdin = bytes.NewReader(a.netConf(i))
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	cmd.Env = []string{"CNI_COMMAND=" + verb, "CNI_CONTAINERID=" + id, "CNI_NETNS=" + a.podNS,
		"CNI_IFNAME=eth0", "CNI_PATH=" + filepath.Dir(a.plugin),
		"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=" + id}
	start := time.Now()
	// Started from a thread in the control plane's namespace, the plugin
	// runs there; the namespace switch is the harness's, not the
	// plugin's, and is not timed apart (tens of microseconds).
	if err := netns.Do(a.c.Nodes[0].NetNS, cmd.Start); err != nil {
		return 0, nil, err
	}
	err := cmd.Wait()
	d := time.Since(start)
	if err != nil {
		return d, nil, fmt.Errorf("%s %s on %s: %v: %s%s", verb, id, a.node(i), err, out.Bytes(), stderr.Bytes())
	}
	return d, out.Bytes(), nil
}

// phase runs verb for every container of ids (ids[i] are node i's) at
// once and returns the wall time, each exec's time and each ADD's
// addresses.
func (a *allocBench) phase(verb string, ids [][]string) (time.Duration, []time.Duration, []string, error) {
	var mu sync.Mutex
	var lat []time.Duration
	var addrs []string
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for i, node := range ids {
		for _, id := range node {
			wg.Go(func() {
				d, out, err := a.exec(verb, i, id)
				var res struct {
					IPs []struct{ Address string } `json:"ips"`
				}
				if err == nil && verb == "ADD" {
					if jerr := json.Unmarshal(out, &res); jerr != nil || len(res.IPs) != 1 {
						err = fmt.Errorf("ADD %s: result %s: %v", id, out, jerr)
					}
				}
				mu.Lock()
				defer mu.Unlock()
				lat = append(lat, d)
				if err != nil && firstErr == nil {
					firstErr = err
				}
				for _, ip := range res.IPs {
					addrs = append(addrs, ip.Address)
				}
			})
		}
	}
	wg.Wait()
	return time.Since(start), lat, addrs, firstErr
}

// waveResult is one wave's figures.
type waveResult struct {
	addWall          time.Duration
	addLat, delLat   []time.Duration
	addReqs, delReqs requests
	addresses        int
}

// wave allocates nodes x perNode addresses at once, checks that no
// address was given twice, then releases them all at once.
func (a *allocBench) wave(ctx context.Context, b *testing.B, n int) waveResult {
	ids := make([][]string, a.shape[0])
	for i := range ids {
		for j := range a.shape[1] {
			ids[i] = append(ids[i], fmt.Sprintf("%s-w%d-n%d-p%d-%08x", a.nodes, n, i, j, time.Now().UnixNano()&0xffffffff))
		}
	}
	r0 := apiRequests(ctx, b, a.c)
	wall, addLat, addrs, err := a.phase("ADD", ids)
	if err != nil {
		b.Fatal(err)
	}
	r1 := apiRequests(ctx, b, a.c)
	_, delLat, _, err := a.phase("DEL", ids)
	if err != nil {
		b.Fatal(err)
	}
	r2 := apiRequests(ctx, b, a.c)
	seen := map[string]bool{}
	for _, s := range addrs {
		if seen[s] {
			b.Fatalf("wave %d: address %s given twice", n, s)
		}
		seen[s] = true
	}
	if recs, _ := os.ReadDir(a.relDir); len(recs) != 0 {
		b.Fatalf("wave %d: %d DELs left a release record: they could not release", n, len(recs))
	}
	return waveResult{addWall: wall, addLat: addLat, delLat: delLat, addReqs: r1.sub(r0), delReqs: r2.sub(r1), addresses: len(addrs)}
}

// report reports waves' figures with the metric names prefixed.
func reportWaves(b *testing.B, prefix string, waves []waveResult) {
	var wall time.Duration
	var addLat, delLat []time.Duration
	addReqs, delReqs := requests{}, requests{}
	adds := 0
	for _, w := range waves {
		wall += w.addWall
		addLat = append(addLat, w.addLat...)
		delLat = append(delLat, w.delLat...)
		adds += w.addresses
		for k, v := range w.addReqs {
			addReqs[k] += v
		}
		for k, v := range w.delReqs {
			delReqs[k] += v
		}
	}
	if adds == 0 {
		return
	}
	b.ReportMetric(float64(adds)/wall.Seconds(), prefix+"allocs/s")
	reportLatency(b, prefix+"ADD_", addLat)
	reportLatency(b, prefix+"DEL_", delLat)
	for _, x := range []struct {
		verb string
		r    requests
	}{{"ADD", addReqs}, {"DEL", delReqs}} {
		total, conflicts, lines := x.r.podnet()
		b.ReportMetric(total/float64(adds), prefix+"apireq/"+x.verb)
		b.ReportMetric(conflicts/float64(adds), prefix+"api409/"+x.verb)
		b.Logf("%s%d %ss: podnet.io requests (verb resource code: count): %v", prefix, adds, x.verb, lines)
	}
}

// BenchmarkModelBAllocations: allocations per second via plugin exec in
// model B (design 4.4 item 2, issue 14's 10 x 40), for each plugin-side
// option: option 1, podnet-ipam on the API itself (store
// kubernetes:KUBECONFIG); option 2, podnet-ipam on its node's agent
// (store agent:SOCKET, one in-process server and cache per node over the
// Kubernetes store), with every List read from the API or (poolcache)
// the pools' List kept for a second. Each wave execs 10 node names x 40 concurrent ADDs
// with unique container IDs, checks no address was given twice, then
// execs the 400 DELs at once; the same with 1 x 40 and 10 x 1 (design
// 4.4 item 3). Run only the 10 x 40 with -bench
// 'BenchmarkModelBAllocations/.*/10x40'. The first wave claims each node's block
// (cold) and is reported apart; b.N more waves are warm. Figures:
// allocations/s (addresses / ADD phase wall time), ADD and DEL p50/p99,
// podnet.io API requests and 409s per ADD and per DEL
// (apiserver_request_total deltas; each request line is logged).
//
//	cd test/k8s && CI=true go test -run XXX -bench BenchmarkModelBAllocations -benchtime 5x -timeout 60m .
func BenchmarkModelBAllocations(b *testing.B) {
	c, kc := kubeStoreCluster(b)
	ctx := context.Background()
	alloc := ipam.New(openKubeStore(b, c, kc, ""), ipam.Config{})
	if err := alloc.PutPool(ctx, ipam.Pool{Name: "bench", CIDR: netip.MustParsePrefix(allocPool)}); err != nil {
		b.Fatal(err)
	}
	plugin := buildIPAMPlugin(b, c)
	_, podNS := testutil.NewNetNS(b)
	// One agent per node, each with its store's cache; the second set
	// also keeps the pools' List for agentsock.DefaultListTTL.
	socks, poolSocks := make([]string, 10), make([]string, 10)
	for i := range socks {
		socks[i], _ = agentSock(b, openKubeStore(b, c, kc, ""), agentsock.Options{})
		poolSocks[i], _ = agentSock(b, openKubeStore(b, c, kc, ""), agentsock.Options{CachedLists: []string{ipam.Keys{}.Pools()}})
	}
	options := []struct {
		name  string
		store func(i int) string
	}{
		{"option1-kube", func(int) string { return "kubernetes:" + kc }},
		{"option2-agent", func(i int) string { return "agent:" + socks[i] }},
		{"option2-agent-poolcache", func(i int) string { return "agent:" + poolSocks[i] }},
	}
	for k, o := range options {
		for _, shape := range allocShapes {
			b.Run(fmt.Sprintf("%s/%dx%d", o.name, shape[0], shape[1]), func(b *testing.B) {
				a := &allocBench{c: c, plugin: plugin, podNS: podNS, relDir: b.TempDir(), lockDir: b.TempDir(), store: o.store,
					nodes: fmt.Sprintf("o%d-%dx%d", k, shape[0], shape[1]), shape: shape}
				cold := a.wave(ctx, b, 0)
				var warm []waveResult
				for n := 1; b.Loop(); n++ {
					warm = append(warm, a.wave(ctx, b, n))
				}
				reportWaves(b, "cold_", []waveResult{cold})
				reportWaves(b, "", warm)
			})
		}
	}
}
