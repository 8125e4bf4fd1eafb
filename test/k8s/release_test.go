package k8s_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podnet/podnet/test/k8s/cluster"
)

// TestRelease installs podnet as a user without a build would: `make
// release VERSION=0.1.0` from this tree, then on two fresh nodes only
// the release's image archive imported (`ctr images import`, the node's
// containerd never pulls) and `kubectl apply -f dist/podnet-0.1.0.yaml`,
// with no edit. The nodes must turn Ready, pods must reach each other
// across nodes without NAT, and every agent must say it is the release:
// its /readyz's first line and podnet_build_info name 0.1.0, not a -dev
// build, the same as the image tag of the manifest.
func TestRelease(t *testing.T) {
	const version = "0.1.0"
	c := cluster.Start(t, cluster.WithNodes(2))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	dist := t.TempDir()
	cmd := exec.CommandContext(ctx, "make", "-C", c.ModuleRoot, "release", "VERSION="+version, "DIST="+dist)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
	manifest := filepath.Join(dist, "podnet-"+version+".yaml")
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	if want := "image: ghcr.io/podnet/podnet:" + version + "\n"; strings.Count(string(data), want) != 2 {
		t.Fatalf("%s: want both containers on %q", manifest, strings.TrimSpace(want))
	}
	if err := c.LoadImages(filepath.Join(dist, "podnet-image-"+version+".tar")); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Kubectl(ctx, "apply", "-f", manifest).CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply -f %s: %v\n%s", manifest, err, out)
	}
	for _, n := range c.Nodes {
		waitNodeReady(ctx, t, c, n.Name, 3*time.Minute)
	}
	for _, n := range c.Nodes {
		waitUntil(ctx, t, n.Name+"'s agent says it is "+version, 2*time.Minute, func() error {
			return agentIsRelease(n, version)
		})
	}
	_, servers := nodeCIDRServers(ctx, t, c)
	crossNodeTraffic(ctx, t, c, servers, "host-gw", "via %s dev underlay0")
}

// agentIsRelease checks n's agent, through its metrics port at the
// node's address: /readyz first says "podnet VERSION (" and /metrics has
// podnet_build_info with version="VERSION".
func agentIsRelease(n *cluster.Node, version string) error {
	hc := n.HTTPClient(5 * time.Second)
	get := func(path string) (string, error) {
		resp, err := hc.Get("http://" + n.IP + ":9603" + path)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return string(body), err
	}
	ready, err := get("/readyz")
	if err != nil {
		return err
	}
	if !strings.HasPrefix(ready, "podnet "+version+" (") {
		return fmt.Errorf("/readyz: %q, want a first line podnet %s (...)", firstLine(ready), version)
	}
	metrics, err := get("/metrics")
	if err != nil {
		return err
	}
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, "podnet_build_info{") {
			if !strings.Contains(l, `version="`+version+`"`) {
				return fmt.Errorf("/metrics: %s, want version=%q", l, version)
			}
			return nil
		}
	}
	return fmt.Errorf("/metrics has no podnet_build_info")
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
