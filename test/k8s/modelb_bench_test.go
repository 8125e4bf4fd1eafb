package k8s

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/agentsock"
	"github.com/podnet/podnet/ipam/store/kube"
	"github.com/podnet/podnet/ipam/store/storetest"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// agentSock serves backend on a new socket, as the node's agent does in
// model B option 2 (docs/design/kubernetes-ipam.md 4.2), until t ends; it
// returns the socket's path and the server.
func agentSock(t testing.TB, backend ipam.Store, o agentsock.Options) (string, *agentsock.Server) {
	t.Helper()
	dir, err := os.MkdirTemp("", "podnet-agentsock")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "ipam.sock")
	l, err := agentsock.Listen(path)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	srv := agentsock.NewServer(backend, o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent store server: %v", err)
		}
		os.RemoveAll(dir)
	})
	return path, srv
}

func openAgentClient(t testing.TB, path string) *agentsock.Client {
	t.Helper()
	c, err := agentsock.Open(path, agentsock.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestAgentSockKube: the store suite through the agent's socket to the
// Kubernetes store (option 2's whole path, cache included), and a write
// behind the agent's back costing one conflict then fresh data.
func TestAgentSockKube(t *testing.T) {
	c, kc := kubeStoreCluster(t)
	t.Run("Suite", func(t *testing.T) {
		storetest.RunWrites(t, func(t *testing.T, prefix string) ipam.Store {
			path, _ := agentSock(t, openKubeStore(t, c, kc, prefix), agentsock.Options{})
			return openAgentClient(t, path)
		}, storetest.IPAMShape())
	})
	t.Run("ForeignWrite", func(t *testing.T) { testAgentSockForeignWrite(t, c, kc) })
}

func testAgentSockForeignWrite(t *testing.T, c *cluster.Cluster, kc string) {
	ctx := t.Context()
	const prefix = "/agentsock-test/"
	direct := openKubeStore(t, c, kc, prefix)
	path, srv := agentSock(t, openKubeStore(t, c, kc, prefix), agentsock.Options{})
	client := openAgentClient(t, path)
	cidr := netip.MustParsePrefix("10.251.0.0/26")
	key := ipam.Keys{Prefix: prefix}.Block(cidr)
	blk := ipam.NewBlock(cidr, ipam.HostAffinity("node-a"))
	value := func(seq uint64) []byte {
		blk.Sequence = seq
		v, _ := json.Marshal(blk)
		return v
	}
	r1, err := client.Write(ctx, ipam.Write{Key: key, Value: value(1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		direct.Write(context.Background(), ipam.Write{Key: key, ModRevision: ipam.AnyRevision, Delete: true})
	})
	r2, err := direct.Write(ctx, ipam.Write{Key: key, ModRevision: r1, Value: value(2)})
	if err != nil {
		t.Fatal(err)
	}
	if kv, err := client.Get(ctx, key); err != nil || kv.ModRevision != r1 {
		t.Fatalf("cached Get = %d, %v; want the cached revision %d", kv.ModRevision, err, r1)
	}
	if _, err := client.Write(ctx, ipam.Write{Key: key, ModRevision: r1, Value: value(9)}); !errors.Is(err, ipam.ErrConflict) {
		t.Fatalf("CAS on the cached revision: %v, want ErrConflict", err)
	}
	kv, err := client.Get(ctx, key)
	if err != nil || kv.ModRevision != r2 {
		t.Fatalf("Get after the conflict = %d, %v; want %d", kv.ModRevision, err, r2)
	}
	if _, err := client.Write(ctx, ipam.Write{Key: key, ModRevision: r2, Value: value(3)}); err != nil {
		t.Fatalf("CAS after the re-read: %v", err)
	}
	if st := srv.Stats(); st.Conflicts != 1 || st.Reads != 1 {
		t.Fatalf("server stats %+v: want 1 conflict and 1 read of the API", st)
	}
}

// BenchmarkModelBStore: what one plugin exec pays the store in a
// steady-state ADD, in process (no exec): open, 3 Gets (pool, node
// index, block: design 2.9, b = 0) and 1 Write (the block's CAS, a full
// /26 of ~20 KB), then Close. Option 1 is ipam/store/kube straight to the
// API server (a TCP connect and TLS handshake per open, through the
// harness's dial from the control plane's network namespace: see the
// harness-dial line to subtract); option 2 is agentsock's client to an
// in-process server over the Kubernetes store, whose cache answers the
// Gets. It reports p50/p99 of the whole sequence and the API server's
// requests per sequence (apiserver_request_total deltas).
//
//	cd test/k8s && CI=true go test -run XXX -bench BenchmarkModelBStore -benchtime 200x -timeout 30m .
func BenchmarkModelBStore(b *testing.B) {
	c, kc := kubeStoreCluster(b)
	ctx := context.Background()
	setup := openKubeStore(b, c, kc, "")
	keys := ipam.Keys{}
	cidr := netip.MustParsePrefix("10.254.0.0/26")
	reads := []string{keys.Pool("bench"), keys.Node("node-1"), keys.Block(cidr)}
	blk := fullBlock(cidr, "node-1")
	for _, w := range []ipam.Write{
		{Key: reads[0], Value: []byte(`{"name":"bench","cidr":"10.254.0.0/16"}`)},
		{Key: reads[1], Value: mustMarshal(b, ipam.NodeIndex{Node: "node-1", Blocks: []ipam.NodeBlock{{CIDR: cidr, State: ipam.AffinityConfirmed}}})},
		{Key: reads[2], Value: mustMarshal(b, blk)},
	} {
		w.ModRevision = ipam.AnyRevision
		if _, err := setup.Write(ctx, w); err != nil {
			b.Fatal(err)
		}
	}
	sock, _ := agentSock(b, openKubeStore(b, c, kc, ""), agentsock.Options{})
	options := []struct {
		name string
		open func() (ipam.Store, error)
	}{
		{"option1-kube", func() (ipam.Store, error) {
			return kube.Open(kube.Options{Kubeconfig: kc, Dial: c.Nodes[0].DialContext})
		}},
		{"option2-agent", func() (ipam.Store, error) { return agentsock.Open(sock, agentsock.ClientOptions{}) }},
	}
	for _, o := range options {
		b.Run(o.name, func(b *testing.B) {
			before := apiRequests(ctx, b, c)
			var lat []time.Duration
			for b.Loop() {
				start := time.Now()
				if err := execLike(ctx, o.open, reads, blk); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			reportLatency(b, "", lat)
			reportRequests(b, apiRequests(ctx, b, c).sub(before), len(lat))
		})
	}
	// A LIST of the pools, as every AutoAssign makes (Allocator.
	// eligiblePools), one after another on a kept connection: the API
	// server answers a LIST from its watch cache only once the cache is
	// known current (consistent reads from cache), which costs more than
	// a GET.
	b.Run("LIST-pools-kept-connection", func(b *testing.B) {
		var lat []time.Duration
		for b.Loop() {
			start := time.Now()
			if _, err := setup.List(ctx, keys.Pools()); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		reportLatency(b, "", lat)
	})
	// The same LIST right after a block's PUT, as the next ADD on the
	// node makes it: the watch cache must have seen the PUT's revision.
	b.Run("LIST-pools-after-PUT", func(b *testing.B) {
		var lat []time.Duration
		kv, err := setup.Get(ctx, reads[2])
		if err != nil {
			b.Fatal(err)
		}
		rev := kv.ModRevision
		for b.Loop() {
			blk.Sequence++
			if rev, err = setup.Write(ctx, ipam.Write{Key: reads[2], ModRevision: rev, Value: mustMarshal(b, blk)}); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			if _, err := setup.List(ctx, keys.Pools()); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		reportLatency(b, "", lat)
	})
	// The same with resourceVersion=0 (any version the watch cache
	// has, no wait), through client-go: what a store could ask instead.
	b.Run("LIST-pools-after-PUT-rv0", func(b *testing.B) {
		dc, err := dynamic.NewForConfig(c.Config)
		if err != nil {
			b.Fatal(err)
		}
		pools := dc.Resource(podnetResource("ippools"))
		kv, err := setup.Get(ctx, reads[2])
		if err != nil {
			b.Fatal(err)
		}
		rev := kv.ModRevision
		var lat []time.Duration
		for b.Loop() {
			blk.Sequence++
			if rev, err = setup.Write(ctx, ipam.Write{Key: reads[2], ModRevision: rev, Value: mustMarshal(b, blk)}); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			if _, err := pools.List(ctx, metav1.ListOptions{ResourceVersion: "0"}); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		reportLatency(b, "", lat)
	})
	b.Run("GET-pool-kept-connection", func(b *testing.B) {
		var lat []time.Duration
		for b.Loop() {
			start := time.Now()
			if _, err := setup.Get(ctx, reads[0]); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		reportLatency(b, "", lat)
	})
	b.Run("harness-dial", func(b *testing.B) {
		for b.Loop() {
			conn, err := c.Nodes[0].DialContext(ctx, "tcp", "198.18.0.1:6443")
			if err != nil {
				b.Fatal(err)
			}
			conn.Close()
		}
	})
}

// execLike is one exec's store traffic in a steady-state ADD.
func execLike(ctx context.Context, open func() (ipam.Store, error), reads []string, blk *ipam.Block) error {
	s, err := open()
	if err != nil {
		return err
	}
	defer s.Close()
	var kv ipam.KV
	for _, k := range reads {
		if kv, err = s.Get(ctx, k); err != nil {
			return err
		}
	}
	blk.Sequence++ // a change, as an allocation makes
	v, err := json.Marshal(blk)
	if err != nil {
		return err
	}
	_, err = s.Write(ctx, ipam.Write{Key: kv.Key, ModRevision: kv.ModRevision, Value: v})
	return err
}

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// reportLatency reports lat's p50 and p99 in ms as name+"p50_ms" and
// name+"p99_ms".
func reportLatency(b *testing.B, name string, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	lat = slices.Clone(lat)
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(lat[len(lat)/2]), name+"p50_ms")
	b.ReportMetric(ms(lat[min(len(lat)-1, len(lat)*99/100)]), name+"p99_ms")
}

// requests is apiserver_request_total by "VERB resource code".
type requests map[string]float64

func (r requests) sub(before requests) requests {
	out := requests{}
	for k, v := range r {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// podnet counts only the podnet.io resources' requests: what the store
// made, not the API server's own traffic meanwhile.
func (r requests) podnet() (total, conflicts float64, lines []string) {
	for k, v := range r {
		f := strings.Fields(k)
		if len(f) != 3 || !strings.HasPrefix(f[1], "ipam") && f[1] != "ippools" {
			continue
		}
		total += v
		if f[2] == "409" {
			conflicts += v
		}
		lines = append(lines, fmt.Sprintf("%s: %.0f", k, v))
	}
	slices.Sort(lines)
	return total, conflicts, lines
}

// reportRequests reports the podnet.io requests and 409s per op and logs
// them by verb, resource and code.
func reportRequests(b *testing.B, r requests, ops int) {
	total, conflicts, lines := r.podnet()
	b.ReportMetric(total/float64(ops), "apireq/op")
	b.ReportMetric(conflicts/float64(ops), "api409/op")
	b.Logf("%d ops: podnet.io requests (verb resource code: count): %s", ops, strings.Join(lines, ", "))
}

var (
	requestLine = regexp.MustCompile(`^apiserver_request_total\{([^}]*)\} ([0-9.e+]+)$`)
	labelKV     = regexp.MustCompile(`(\w+)="([^"]*)"`)
)

// apiRequests reads apiserver_request_total from the API server.
func apiRequests(ctx context.Context, t testing.TB, c *cluster.Cluster) requests {
	t.Helper()
	body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("apiserver /metrics: %v", err)
	}
	out := requests{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		m := requestLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		l := map[string]string{}
		for _, kv := range labelKV.FindAllStringSubmatch(m[1], -1) {
			l[kv[1]] = kv[2]
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatalf("apiserver /metrics: %s: %v", sc.Text(), err)
		}
		out[l["verb"]+" "+l["resource"]+" "+l["code"]] += v
	}
	return out
}
