package k8s_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/test/k8s/cluster"
	"github.com/podnet/podnet/test/k8s/conformance"
)

// policyScalePeerEnv, set to kube-router, has BenchmarkPolicyScale
// measure kube-router's policy controller too, on the same objects.
const policyScalePeerEnv = "PODNET_POLICY_SCALE_PEER"

// scaleLocalHostIP is the status.hostIP createScalePod gives the agent
// node's pods; kube-router takes a pod for its node's when the two
// match its Node's InternalIP.
const scaleLocalHostIP = "198.19.0.1"

// kubeRouterScale is what runKubeRouterScale measures.
type kubeRouterScale struct {
	sync time.Duration // start to its first full policy sync done
	// rss is the process's VmRSS (/proc/<pid>/status); heap its Go heap
	// in use (go_memstats_heap_inuse_bytes), garbage not yet collected
	// included: kube-router has no way to collect first.
	rss, heap float64
	// gaveUp: stopped before its first full sync, its VmRSS past
	// kubeRouterMaxRSS (rss is then the last reading) or the deadline.
	gaveUp string
}

// kubeRouterMaxRSS is where runKubeRouterScale stops kube-router on the
// shared machine (PODNET_POLICY_SCALE_PEER_MAX_MB sets another).
const kubeRouterMaxRSS = 8 << 30

// runKubeRouterScale runs kube-router's policy controller, as a process,
// for the agent's node (a Node object it needs, created here with
// InternalIP scaleLocalHostIP), until its first full sync of every pod
// and policy is done, reads its memory and stops it. It runs in the
// control plane's network namespace (the only one that reaches the API
// server in a control-plane-only cluster), where its iptables rules and
// ipsets go with the cluster; they match only the agent's pods'
// addresses, none of the API server's traffic.
func runKubeRouterScale(ctx context.Context, b *testing.B, c *cluster.Cluster, client *kubernetes.Clientset) kubeRouterScale {
	b.Helper()
	prog, err := cluster.KubeRouter(b.Logf)
	if err != nil {
		b.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: scaleAgentNode}}
	if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: scaleLocalHostIP}}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		b.Fatal(err)
	}
	kubeconfig := filepath.Join(c.Dir, "kube-router.kubeconfig")
	if err := conformance.WriteKubeconfig(kubeconfig, c.Config); err != nil {
		b.Fatal(err)
	}
	logPath := filepath.Join(c.Dir, "logs", "kube-router-scale.log")
	logf, err := os.Create(logPath)
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command("nsenter", "--net="+c.Nodes[0].NetNS, "--", prog,
		"--run-router=false", "--run-firewall=true", "--run-service-proxy=false",
		"--kubeconfig="+kubeconfig, "--hostname-override="+scaleAgentNode,
		"--service-cluster-ip-range="+cluster.ServiceCIDR, "--health-port=0",
		"--metrics-port="+strconv.Itoa(cluster.KubeRouterMetricsPort))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "PATH=/usr/sbin:/usr/bin:/sbin:/bin")
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		// nsenter execs kube-router: the PID is kube-router's.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_, _ = cmd.Process.Wait()
	}()
	// Its metrics listen in the node's namespace, which the machine's
	// has no route to: the connection is made there.
	metrics := "http://" + c.Nodes[0].IP + ":" + strconv.Itoa(cluster.KubeRouterMetricsPort) + "/metrics"
	nodeNS := c.Nodes[0].NetNS
	maxRSS := float64(kubeRouterMaxRSS)
	if mb := latencyEnv(b, "PODNET_POLICY_SCALE_PEER_MAX_MB", 0, 1); mb > 0 {
		maxRSS = float64(mb << 20)
	}
	var r kubeRouterScale
	deadline := time.Now().Add(30 * time.Minute)
	for {
		m, err := scrapeMetrics(metrics, nodeNS)
		rss, rerr := vmRSS(cmd.Process.Pid)
		if rerr != nil {
			b.Fatalf("kube-router exited before its first full sync (%v); its log: %s", rerr, logPath)
		}
		r.rss = max(r.rss, rss)
		// v2.1.0 prefixes its controller's metrics with kube_router_
		// (kube_router_controller_iptables_sync_time_count); the bare
		// name is what older releases wrote.
		if err == nil && max(m["kube_router_controller_iptables_sync_time_count"], m["controller_iptables_sync_time_count"]) >= 1 {
			r.sync = time.Since(start)
			r.heap = m["go_memstats_heap_inuse_bytes"]
			r.rss = rss
			return r
		}
		switch {
		case rss > maxRSS:
			r.gaveUp = fmt.Sprintf("VmRSS %.0f MB past the %.0f MB limit", rss/1e6, maxRSS/1e6)
		case time.Now().After(deadline) || ctx.Err() != nil:
			r.gaveUp = "no full sync in 30 minutes"
		}
		if r.gaveUp != "" {
			r.sync = time.Since(start)
			b.Logf("kube-router stopped %s after start, before its first full sync: %s; its log: %s", r.sync.Round(time.Second), r.gaveUp, logPath)
			return r
		}
		time.Sleep(time.Second)
	}
}

// scrapeMetrics reads a Prometheus text page's unlabelled samples, its
// connection made in the network namespace nsPath.
func scrapeMetrics(url, nsPath string) (map[string]float64, error) {
	dial := func(ctx context.Context, network, addr string) (conn net.Conn, err error) {
		err = netns.Do(nsPath, func() error {
			var d net.Dialer
			conn, err = d.DialContext(ctx, network, addr)
			return err
		})
		return conn, err
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			m[name] = v
		}
	}
	return m, sc.Err()
}

// vmRSS is the process's resident set in bytes.
func vmRSS(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}
