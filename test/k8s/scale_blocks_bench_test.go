package k8s_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/podnet/podnet/agent"
	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/kube"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// BenchmarkAgent5000NodesBlocks measures model B (issue 14: block IPAM on
// the API) at 5,000 nodes, as BenchmarkAgent5000Nodes does model A: the
// same control plane alone and 5,000 annotated Nodes, and for each node
// an IPAMBlock affine to it (a /24, its podCIDR's range) and an IPAMNode
// listing that block confirmed, as a node's first claim leaves them. The
// agent runs with --ipam blocks: it follows Nodes (addresses) and
// IPAMNodes (what to route), never blocks. Removing one node's IPAMNode
// and creating it again withdraws and restores its route.
//
//	cd test/k8s && CI=true go test -run XXX -bench BenchmarkAgent5000NodesBlocks -benchtime 1x -timeout 30m -v .
func BenchmarkAgent5000NodesBlocks(b *testing.B) {
	n := scaleNodes(b)
	c := cluster.Start(b, cluster.WithControlPlaneOnly())
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	if err := c.ApplyIPAMCRDs(ctx); err != nil {
		b.Fatal(err)
	}
	kc := filepath.Join(c.Dir, "scale.kubeconfig")
	if err := c.WriteJSONKubeconfig(kc); err != nil {
		b.Fatal(err)
	}
	store, err := kube.Open(kube.Options{Kubeconfig: kc, Dial: c.Nodes[0].DialContext})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	client := scaleClient(b, c)
	start := time.Now()
	createScaleNodes(ctx, b, client, 0, n)
	if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: scaleAgentNode}},
		metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if err := forEachScaleNode(n, func(i int) error { return createScaleBlock(ctx, store, i) }); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d Nodes, IPAMBlocks and IPAMNodes created in %s", n+1, time.Since(start).Round(time.Millisecond))
	keys := ipam.Keys{}
	m := scaleModel{
		kube: func(cfg *rest.Config) *agent.KubeConfig {
			return &agent.KubeConfig{REST: cfg, Blocks: &agent.KubeBlocks{}}
		},
		remove: func(ctx context.Context, i int) error {
			kv, err := store.Get(ctx, keys.Node(scaleNodeName(i)))
			if err != nil {
				return err
			}
			_, err = store.Write(ctx, ipam.Write{Key: kv.Key, ModRevision: kv.ModRevision, Delete: true})
			return err
		},
		restore: func(ctx context.Context, i int) error {
			_, err := store.Write(ctx, scaleIndexWrite(i))
			return err
		},
		resources: []string{" core/nodes/", " podnet.io/ipamnodes/"},
	}
	for range b.N {
		r := runScaleAgent(ctx, b, c, scaleAgentNetNS(b), n, m)
		r.report(b, n, "model B")
	}
}

// createScaleBlock writes fake node i's block, affine to it, and its
// index naming the block confirmed.
func createScaleBlock(ctx context.Context, store ipam.Store, i int) error {
	blk := ipam.NewBlock(scalePodCIDR(i), "host:"+scaleNodeName(i))
	v, err := json.Marshal(blk)
	if err != nil {
		return err
	}
	if _, err := store.Write(ctx, ipam.Write{Key: ipam.Keys{}.Block(blk.CIDR), Value: v}); err != nil {
		return fmt.Errorf("block of node %d: %w", i, err)
	}
	if _, err := store.Write(ctx, scaleIndexWrite(i)); err != nil {
		return fmt.Errorf("index of node %d: %w", i, err)
	}
	return nil
}

// scaleIndexWrite creates fake node i's index: its one block confirmed.
func scaleIndexWrite(i int) ipam.Write {
	x := ipam.NodeIndex{Node: scaleNodeName(i), Blocks: []ipam.NodeBlock{
		{CIDR: scalePodCIDR(i), State: ipam.AffinityConfirmed, Since: time.Unix(1_800_000_000, 0).UTC()},
	}}
	v, _ := json.Marshal(x)
	return ipam.Write{Key: ipam.Keys{}.Node(x.Node), Value: v}
}

// forEachScaleNode runs fn for 0..n-1, 32 at a time, and returns the
// first error.
func forEachScaleNode(n int, fn func(i int) error) error {
	idx := make(chan int)
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for range min(32, n) {
		wg.Go(func() {
			for i := range idx {
				if err := fn(i); err != nil {
					once.Do(func() { first = err })
				}
			}
		})
	}
	for i := range n {
		idx <- i
	}
	close(idx)
	wg.Wait()
	return first
}
