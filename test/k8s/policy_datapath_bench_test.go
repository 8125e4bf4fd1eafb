package k8s_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// Ports of the data-path measurements in the server pod.
const (
	dpIperfPort    = 5201
	dpSockperfPort = 11111
	dpCRRPort      = 5301
)

// BenchmarkPolicyDataPath measures the same-node data path between two
// pods with 0, 100 and 1,000 NetworkPolicies selecting the server
// (PODNET_POLICY_DATAPATH_N sets the counts, PODNET_POLICY_DATAPATH_SECONDS
// each measurement's length, 3), on a one-node cluster of its own per
// chain: podnet as shipped (its policy service) and kube-router's
// policy controller over podnet without it (the peer). With n policies,
// n-1 allow ingress from an ipBlock (/32) that is not the client and
// one allows it by pod label, so a connection's first packet is judged
// against all of them; a third pod, which none allows, must then be
// refused (the policies are in force) before anything is measured.
// From inside the pods' network namespaces (the machine's programs, as
// interop's BenchmarkDataPath runs them): iperf3, one TCP stream (Gbps);
// sockperf ping-pong over TCP (transactions/s); and TCP connect, one
// byte each way, reset-close, in a loop (connections/s, netperf's
// TCP_CRR). Each figure is the median of PODNET_POLICY_DATAPATH_ROUNDS
// (3) rounds of the three, taken in turn; ratios to np-0 are the
// reader's.
//
//	cd test/k8s && CI=true go test -count=1 -run XXX -bench '^BenchmarkPolicyDataPath$' -benchtime 1x -v -timeout 60m .
func BenchmarkPolicyDataPath(b *testing.B) {
	counts := []int{0, 100, 1000}
	if s := os.Getenv("PODNET_POLICY_DATAPATH_N"); s != "" {
		counts = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n < 0 {
				b.Fatalf("PODNET_POLICY_DATAPATH_N=%q: want counts like 0,100,1000", s)
			}
			counts = append(counts, n)
		}
	}
	secs := latencyEnv(b, "PODNET_POLICY_DATAPATH_SECONDS", 3, 1)
	rounds := latencyEnv(b, "PODNET_POLICY_DATAPATH_ROUNDS", 3, 1)
	for _, tool := range []string{"iperf3", "sockperf"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Fatalf("%s: %v (make bench-datapath installs it)", tool, err)
		}
	}
	for _, ch := range []latencyChain{{name: "podnet", variant: cluster.Default}, {name: "kube-router", variant: cluster.Default, kubeRouter: true}} {
		b.Run(ch.name, func(b *testing.B) { policyDataPath(b, ch, counts, secs, rounds) })
	}
}

// policyDataPath measures one chain on a one-node cluster of its own.
func policyDataPath(b *testing.B, ch latencyChain, counts []int, secs, rounds int) {
	c := cluster.Start(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	installLatencyChain(ctx, b, c, ch)
	ns := map[string]*netns.NetNS{}
	var server *corev1.Pod
	for _, role := range []string{"server", "client", "other"} {
		p := diagPod("dp-"+role, "serve", "--listen", fmt.Sprintf(":%d", diagPort))
		p.Labels["dp"] = role
		if _, err := c.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		p = latencyWaitRunning(ctx, b, c, p.Name)
		h, err := podNetNS(ctx, c.Nodes[0], p)
		if err != nil {
			b.Fatal(err)
		}
		defer h.Close()
		ns[role] = h
		if role == "server" {
			server = p
		}
	}
	addr := netip.MustParseAddr(server.Status.PodIP)
	made := 0
	for _, n := range counts {
		made = dpPolicies(ctx, b, c, made, n)
		b.Run(fmt.Sprintf("np-%d", n), func(b *testing.B) {
			dpWaitInForce(b, ns["client"], ns["other"], addr, n > 0)
			var gbps, rr, crr []float64
			for range rounds {
				gbps = append(gbps, dpIperf(b, ns["server"], ns["client"], addr, secs))
				rr = append(rr, dpSockperf(b, ns["server"], ns["client"], addr, secs))
				crr = append(crr, dpConnectRate(b, ns["server"], ns["client"], addr, secs))
			}
			b.ReportMetric(dpMedian(gbps), "Gbps")
			b.ReportMetric(dpMedian(rr), "RR/s")
			b.ReportMetric(dpMedian(crr), "CRR/s")
			b.Logf("%s, %d policies select the server, medians of %d: %.2f Gbps %.2f, %.0f transactions/s %.0f, %.0f connections/s %.0f (load %s)",
				ch.name, n, rounds, dpMedian(gbps), gbps, dpMedian(rr), rr, dpMedian(crr), crr, loadAvg())
		})
	}
}

// dpPolicies brings the policies selecting dp=server from made to n
// (only up: counts ascend) and returns n.
func dpPolicies(ctx context.Context, b *testing.B, c *cluster.Cluster, made, n int) int {
	b.Helper()
	if n < made {
		b.Fatalf("policy counts must ascend: %d after %d", n, made)
	}
	sel := metav1.LabelSelector{MatchLabels: map[string]string{"dp": "server"}}
	ingress := networkingv1.PolicyTypeIngress
	scaleParallel(ctx, b, n-made, func(i int) error {
		i += made
		np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("dp-a-%05d", i)},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: sel, PolicyTypes: []networkingv1.PolicyType{ingress}}}
		peer := networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: fmt.Sprintf("172.16.%d.%d/32", i/256, i%256)}}
		if i == 0 {
			// The one that lets the client in, last by name (podnet
			// walks a pod's policies in name order; kube-router in its
			// own), as interop's np-N has the client the last peer.
			np.Name = "dp-z-allow-client"
			peer = networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"dp": "client"}}}
		}
		np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{peer}}}
		_, err := c.Client.NetworkingV1().NetworkPolicies("default").Create(ctx, np, metav1.CreateOptions{})
		return err
	})
	return n
}

// dpWaitInForce waits until the client connects to the server's diag
// port and, with isolated, the other pod does not, then 5 s more for
// the last of the rules.
func dpWaitInForce(b *testing.B, client, other *netns.NetNS, addr netip.Addr, isolated bool) {
	b.Helper()
	dst := netip.AddrPortFrom(addr, diagPort)
	latencyWait(b, "the policies in force", 3*time.Minute, func() error {
		if p := dialFrom(client, dst, 500*time.Millisecond); p.result != probeConnected {
			return fmt.Errorf("client: %v", p.err)
		}
		// Dropped or rejected, as the chain does it.
		if p := dialFrom(other, dst, 500*time.Millisecond); isolated && p.result == probeConnected {
			return fmt.Errorf("the other pod still connects")
		}
		return nil
	})
	time.Sleep(5 * time.Second)
}

// dpServer starts a server in ns and returns its stop.
func dpServer(b *testing.B, ns *netns.NetNS, name string, args ...string) func() {
	b.Helper()
	cmd := exec.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	if err := ns.Do(cmd.Start); err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	time.Sleep(500 * time.Millisecond)
	return func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}
}

// dpClient runs a client in ns and returns its output.
func dpClient(b *testing.B, ns *netns.NetNS, name string, args ...string) []byte {
	b.Helper()
	var out []byte
	err := ns.Do(func() error {
		var err error
		out, err = exec.Command(name, args...).CombinedOutput()
		return err
	})
	if err != nil {
		b.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func dpIperf(b *testing.B, server, client *netns.NetNS, addr netip.Addr, secs int) float64 {
	stop := dpServer(b, server, "iperf3", "-s", "-1", "-B", addr.String(), "-p", strconv.Itoa(dpIperfPort))
	defer stop()
	out := dpClient(b, client, "iperf3", "-c", addr.String(), "-p", strconv.Itoa(dpIperfPort), "-t", strconv.Itoa(secs), "-J")
	var r struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &r); err != nil || r.End.SumReceived.BitsPerSecond <= 0 {
		b.Fatalf("iperf3: %v\n%s", err, out)
	}
	return r.End.SumReceived.BitsPerSecond / 1e9
}

var dpSockperfValid = regexp.MustCompile(`\[Valid Duration\] RunTime=([0-9.]+) sec; SentMessages=\d+; ReceivedMessages=(\d+)`)

func dpSockperf(b *testing.B, server, client *netns.NetNS, addr netip.Addr, secs int) float64 {
	port := strconv.Itoa(dpSockperfPort)
	stop := dpServer(b, server, "sockperf", "server", "--tcp", "--ip", addr.String(), "--port", port)
	defer stop()
	out := dpClient(b, client, "sockperf", "ping-pong", "--tcp", "--ip", addr.String(), "--port", port, "--time", strconv.Itoa(secs))
	m := dpSockperfValid.FindSubmatch(out)
	if m == nil {
		b.Fatalf("sockperf: no valid-duration line:\n%s", out)
	}
	run, _ := strconv.ParseFloat(string(m[1]), 64)
	replies, _ := strconv.ParseFloat(string(m[2]), 64)
	if run <= 0 {
		b.Fatalf("sockperf: %s", m[0])
	}
	return replies / run
}

// dpConnectRate is interop's connectRate between two pods: connect,
// one byte each way, reset-close, for secs seconds.
func dpConnectRate(b *testing.B, server, client *netns.NetNS, addr netip.Addr, secs int) float64 {
	dst := netip.AddrPortFrom(addr, dpCRRPort).String()
	var ln net.Listener
	if err := server.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", dst)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				buf := make([]byte, 1)
				if _, err := io.ReadFull(c, buf); err == nil {
					_, _ = c.Write(buf)
				}
			})
		}
	})
	defer func() {
		ln.Close()
		wg.Wait()
	}()
	n := 0
	start := time.Now()
	err := client.Do(func() error {
		d := net.Dialer{Timeout: 2 * time.Second}
		buf := []byte{1}
		for end := start.Add(time.Duration(secs) * time.Second); time.Now().Before(end); n++ {
			c, err := d.Dial("tcp", dst)
			if err != nil {
				return err
			}
			if _, err = c.Write(buf); err == nil {
				_, err = io.ReadFull(c, buf)
			}
			_ = c.(*net.TCPConn).SetLinger(0)
			c.Close()
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatalf("connect loop after %d connections: %v", n, err)
	}
	return float64(n) / time.Since(start).Seconds()
}

// dpMedian is the middle value (the upper of two).
func dpMedian(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// loadAvg is the machine's 1-minute load average, for the log.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}
