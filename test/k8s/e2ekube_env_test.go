package k8s_test

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/podnet/podnet/agent/route"
	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/test/e2e/e2enet"
	"github.com/podnet/podnet/test/k8s/cluster"
)

const (
	// e2eConfKey is the ConfigMap's conflist key, and the file name the
	// DaemonSet mounts it under.
	e2eConfKey = "10-podnet.conflist"
	// e2eClusterCIDR6 is the IPv6 cluster CIDR of the ConfigMap's
	// dual-stack edit (cluster_cidr comma-separated); node i's podCIDR is
	// fd00:244:0:i::/64, as kube-controller-manager's default
	// --node-cidr-mask-size-ipv6 carves it.
	e2eClusterCIDR6 = "fd00:244::/56"
	// e2eServerName is a name on the API server's certificate: the
	// agents reach it on the underlay's server address, which the
	// certificate need not name.
	e2eServerName = "kubernetes"
)

// nodeCIDRConfigMapPath is the shipped default ConfigMap (node CIDR): the one place
// this test names its path.
func nodeCIDRConfigMapPath(root string) string {
	return filepath.Join(root, "deploy/kubernetes/configmap.yaml")
}

// e2eShipped is what the agents run with from the shipped ConfigMap.
type e2eShipped struct {
	clusterCIDRs []netip.Prefix // cluster_cidr, with the dual-stack edit
	mode         route.Mode     // routing_mode
	conflist     []byte         // 10-podnet.conflist, verbatim
	network      string         // the conflist's name
}

// loadShipped reads the ConfigMap strictly and makes the edit it
// documents for dual-stack: cluster_cidr gets the IPv6 range too.
func loadShipped(t *testing.T, root string) e2eShipped {
	t.Helper()
	path := nodeCIDRConfigMapPath(root)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(b, &cm); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var s e2eShipped
	for _, c := range strings.Split(cm.Data["cluster_cidr"]+","+e2eClusterCIDR6, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			t.Fatalf("%s: cluster_cidr %q: %v", path, cm.Data["cluster_cidr"], err)
		}
		s.clusterCIDRs = append(s.clusterCIDRs, p)
	}
	if len(s.clusterCIDRs) != 2 || !s.clusterCIDRs[0].Addr().Is4() || s.clusterCIDRs[0].Bits() > 16 {
		t.Fatalf("%s: cluster_cidr %q: want one IPv4 range of /16 or wider to add %s to", path, cm.Data["cluster_cidr"], e2eClusterCIDR6)
	}
	if s.mode, err = route.ParseMode(cm.Data["routing_mode"]); err != nil {
		t.Fatalf("%s: routing_mode: %v", path, err)
	}
	s.conflist = []byte(cm.Data[e2eConfKey])
	list, err := cni.ParseNetworkConfigList(s.conflist, e2eConfKey)
	if err != nil {
		t.Fatalf("%s: %s: %v", path, e2eConfKey, err)
	}
	s.network = list.Name
	return s
}

// podCIDRs are node i's spec.podCIDRs: the i-th /24 of the IPv4 cluster
// CIDR and the i-th /64 of the IPv6 one.
func (s e2eShipped) podCIDRs(i int) []netip.Prefix {
	b4 := s.clusterCIDRs[0].Addr().As4()
	binary.BigEndian.PutUint32(b4[:], binary.BigEndian.Uint32(b4[:])+uint32(i)<<8)
	b6 := s.clusterCIDRs[1].Addr().As16()
	binary.BigEndian.PutUint64(b6[:8], binary.BigEndian.Uint64(b6[:8])+uint64(i))
	return []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4(b4), 24), netip.PrefixFrom(netip.AddrFrom16(b6), 64)}
}

// serveAPI forwards TCP from u.Server:6443, in the underlay's hub, to the
// cluster's API server, so that the agents reach it over the underlay as
// they reach etcd in test/e2e. It returns the server's address there.
func serveAPI(t *testing.T, c *cluster.Cluster, u *e2enet.Underlay) string {
	t.Helper()
	target, err := url.Parse(c.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(u.Server.String(), "6443")
	var l net.Listener
	if err := netns.Do(u.Hub.Path, func() (err error) { l, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	var wg sync.WaitGroup
	track := func(conn net.Conn, add bool) {
		mu.Lock()
		defer mu.Unlock()
		if add {
			open[conn] = true
		} else {
			delete(open, conn)
		}
	}
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for conn := range open {
			conn.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			track(conn, true)
			wg.Go(func() {
				defer track(conn, false)
				forward(conn, func(ctx context.Context) (net.Conn, error) { return c.Nodes[0].DialContext(ctx, "tcp", target.Host) }, track)
			})
		}
	})
	return addr
}

// forward copies between conn and a connection dial opens until either
// side ends.
func forward(conn net.Conn, dial func(context.Context) (net.Conn, error), track func(net.Conn, bool)) {
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	up, err := dial(ctx)
	cancel()
	if err != nil {
		return
	}
	track(up, true)
	defer track(up, false)
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, conn); done <- struct{}{} }()
	go func() { _, _ = io.Copy(conn, up); done <- struct{}{} }()
	<-done
	conn.Close()
	up.Close()
	<-done
}

// writeKubeconfig writes the agents' kubeconfig: the cluster's admin
// identity, the API server at server (on the underlay).
func writeKubeconfig(t *testing.T, c *cluster.Cluster, dir, server string) string {
	t.Helper()
	b64 := base64.StdEncoding.EncodeToString
	tc := c.Config.TLSClientConfig
	conf := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: https://%s
    tls-server-name: %s
    certificate-authority-data: %s
users:
- name: agent
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: e2e
  context: {cluster: e2e, user: agent}
current-context: e2e
`, server, e2eServerName, b64(tc.CAData), b64(tc.CertData), b64(tc.KeyData))
	path := filepath.Join(dir, "agent.kubeconfig")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// registerNode creates n's Node as its kubelet would, without podCIDRs,
// and deletes it when the test ends.
func registerNode(ctx context.Context, t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
	}}}
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Node %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete Node %s: %v", name, err)
		}
	})
}

// allocatePodCIDRs sets the Node's spec.podCIDRs, as
// kube-controller-manager --allocate-node-cidrs does once.
func allocatePodCIDRs(ctx context.Context, t *testing.T, c *cluster.Cluster, name string, cidrs []netip.Prefix) {
	t.Helper()
	var ss []string
	for _, p := range cidrs {
		ss = append(ss, p.String())
	}
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"podCIDR": ss[0], "podCIDRs": ss}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("Node %s: set podCIDRs %v: %v", name, ss, err)
	}
}
