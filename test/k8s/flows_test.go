package k8s_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/flows"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// TestFlows is issue 32's "flows are true" on two real nodes with
// deploy/kubernetes as shipped (flows on): a scripted set of connections,
// TCP and UDP, on one node and across nodes, allowed by a NetworkPolicy,
// denied by it, denied by an Admin ClusterNetworkPolicy, and forged from
// a pod by a raw frame, each found in the real `podnet flows
// --kubeconfig` with its verdict, rule and pods; then 1,000 short
// connections, at least 99 % recorded on each node; then the CLI's bad
// input (a namespace that does not exist answers empty, a bad verdict
// names the flag) and its follow mode across the API server's proxy;
// `podnet ui --kubeconfig`'s /api/flows over the same agents;
// and every panel of deploy/grafana's dashboard (dashboardNotOn aside)
// queries metrics the agents export.
func TestFlows(t *testing.T) {
	testutil.RequireRoot(t)
	c := cluster.Start(t, cluster.WithNodes(2))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	deployPodnet(ctx, t, c, cluster.Default, nil)
	w := newFlowWorld(ctx, t, c)
	w.policies(ctx, t)

	cases := w.script(t)
	got := w.waitRecorded(ctx, t, cases)
	for _, fc := range cases {
		t.Logf("%-44s %s", fc.name, describeRecord(got[fc.name]))
	}
	if out, err := c.Nodes[0].Podnet(ctx, "flows", "--kubeconfig", w.kc, "--namespace", "default", "--port", fmt.Sprint(flowServerPort), "--limit", "12"); err == nil {
		t.Logf("podnet flows --namespace default --port %d --limit 12:\n%s", flowServerPort, out)
	} else {
		t.Errorf("podnet flows, text: %v", err)
	}
	w.thousand(ctx, t)
	checkDashboard(ctx, t, c, func(panel string) bool { return dashboardNotOn[panel] == "" })
	w.badInput(ctx, t)
	w.follow(ctx, t)
	w.ui(ctx, t)
}

// flowServerPort is where the test's echo servers listen in the server
// pods' namespaces, TCP and UDP.
const flowServerPort = 7100

type flowWorld struct {
	c    *cluster.Cluster
	kc   string
	pods map[string]*flowPod
}

type flowPod struct {
	pod  *corev1.Pod
	ns   *netns.NetNS
	ip   netip.Addr
	node string
}

var flowPods = []struct {
	name   string
	node   int
	labels map[string]string
}{
	{"fl-c1", 0, map[string]string{"flows": "client", "access": "ok"}},
	{"fl-c2", 1, map[string]string{"flows": "client", "access": "no"}},
	{"fl-s1", 0, map[string]string{"flows": "server"}},
	{"fl-s2", 1, map[string]string{"flows": "server"}},
	{"fl-x", 1, map[string]string{"flows": "cnp-target"}},
}

func newFlowWorld(ctx context.Context, t *testing.T, c *cluster.Cluster) *flowWorld {
	t.Helper()
	w := &flowWorld{c: c, pods: map[string]*flowPod{}, kc: filepath.Join(t.TempDir(), "admin.kubeconfig")}
	if err := c.WriteJSONKubeconfig(w.kc); err != nil {
		t.Fatal(err)
	}
	for _, fp := range flowPods {
		p := onNode(c.Nodes[fp.node], diagPod(fp.name, "serve", "--listen", fmt.Sprintf(":%d", diagPort)))
		for k, v := range fp.labels {
			p.Labels[k] = v
		}
		if _, err := c.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, fp := range flowPods {
		p := waitPod(ctx, t, c, fp.name, corev1.PodRunning)
		ns := openPodNetNS(ctx, t, c, p)
		w.pods[fp.name] = &flowPod{pod: p, ns: ns, ip: netip.MustParseAddr(p.Status.PodIP), node: p.Spec.NodeName}
		if fp.labels["flows"] != "client" {
			startFlowEcho(t, w.pods[fp.name])
		}
	}
	return w
}

// startFlowEcho serves TCP (read to the end, close) and UDP (echo) on
// flowServerPort inside the pod's namespace, until the test ends.
func startFlowEcho(t *testing.T, p *flowPod) {
	t.Helper()
	var tl net.Listener
	var ul net.PacketConn
	err := p.ns.Do(func() (err error) {
		addr := netip.AddrPortFrom(p.ip, flowServerPort).String()
		if tl, err = net.Listen("tcp4", addr); err != nil {
			return err
		}
		ul, err = net.ListenPacket("udp4", addr)
		return err
	})
	if err != nil {
		t.Fatalf("echo in %s: %v", p.pod.Name, err)
	}
	t.Cleanup(func() { tl.Close(); ul.Close() })
	go func() {
		for {
			conn, err := tl.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
				var b [64]byte
				for {
					if _, err := conn.Read(b[:]); err != nil {
						return
					}
				}
			}()
		}
	}()
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := ul.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = ul.WriteTo(buf[:n], from)
		}
	}()
}

// policies: the servers take flowServerPort from access=ok only (a
// NetworkPolicy), and an Admin ClusterNetworkPolicy denies every client
// to fl-x. It returns once both are in force.
func (w *flowWorld) policies(ctx context.Context, t *testing.T) {
	t.Helper()
	port := intstr.FromInt32(flowServerPort)
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "fl-servers"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"flows": "server"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"access": "ok"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}, {Protocol: &udp, Port: &port}},
			}},
		},
	}
	if _, err := w.c.Client.NetworkingV1().NetworkPolicies("default").Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := func(k, v string) map[string]any {
		return map[string]any{"pods": map[string]any{"namespaceSelector": map[string]any{},
			"podSelector": map[string]any{"matchLabels": map[string]any{k: v}}}}
	}
	if err := createClusterPolicy(ctx, w.c, "fl-admin-deny", map[string]any{
		"tier": "Admin", "priority": int64(20), "subject": pods("flows", "cnp-target"),
		"ingress": []any{map[string]any{"name": "deny-clients", "action": "Deny", "from": []any{pods("flows", "client")}}},
	}); err != nil {
		t.Fatalf("ClusterNetworkPolicy fl-admin-deny: %v", err)
	}
	c1, c2 := w.pods["fl-c1"], w.pods["fl-c2"]
	waitUntil(ctx, t, "the policies in force", 2*time.Minute, func() error {
		if err := tcpDial(c1, w.pods["fl-s1"].ip, 0); err != nil {
			return fmt.Errorf("fl-c1 -> fl-s1: %v", err)
		}
		if tcpDial(c2, w.pods["fl-s1"].ip, 0) == nil {
			return fmt.Errorf("fl-c2 -> fl-s1 still connects")
		}
		if tcpDial(c1, w.pods["fl-x"].ip, 0) == nil {
			return fmt.Errorf("fl-c1 -> fl-x still connects")
		}
		return nil
	})
}

// tcpDial connects from p to dst:flowServerPort from local port lport
// (0: any), writes a byte and closes with a reset (SO_LINGER 0), so the
// connection's conntrack entry ends in seconds, not TIME_WAIT's minutes.
func tcpDial(p *flowPod, dst netip.Addr, lport int) error {
	return p.ns.Do(func() error {
		d := net.Dialer{Timeout: time.Second, LocalAddr: &net.TCPAddr{IP: p.ip.AsSlice(), Port: lport}}
		conn, err := d.Dial("tcp4", netip.AddrPortFrom(dst, flowServerPort).String())
		if err != nil {
			return err
		}
		_, _ = conn.Write([]byte{1})
		_ = conn.(*net.TCPConn).SetLinger(0)
		return conn.Close()
	})
}

// udpSend sends one datagram from p's lport to dst:flowServerPort and
// waits up to wait for the echo; it reports whether it came.
func udpSend(p *flowPod, dst netip.Addr, lport int, wait time.Duration) (bool, error) {
	var echoed bool
	err := p.ns.Do(func() error {
		conn, err := net.DialUDP("udp4", &net.UDPAddr{IP: p.ip.AsSlice(), Port: lport}, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, flowServerPort)))
		if err != nil {
			return err
		}
		defer conn.Close()
		if _, err := conn.Write([]byte("flow")); err != nil {
			return err
		}
		_ = conn.SetReadDeadline(time.Now().Add(wait))
		var b [16]byte
		_, err = conn.Read(b[:])
		echoed = err == nil
		return nil
	})
	return echoed, err
}

// flowCase is one scripted connection and the record it must leave.
type flowCase struct {
	name     string
	src, dst string // pod names; src "" for the forged source
	srcIP    netip.Addr
	sport    uint16 // 0: any (the forged frame's)
	protocol string
	verdict  flows.Verdict
	rule     *flows.Rule // a rule the record must name; nil: none asked
	node     string      // the node whose agent must record it
}

// script makes the connections and returns what each must leave.
func (w *flowWorld) script(t *testing.T) []flowCase {
	t.Helper()
	p := w.pods
	allow := &flows.Rule{Kind: "NetworkPolicy", Namespace: "default", Name: "fl-servers", Direction: "ingress", Index: 0, Action: "Allow"}
	isolate := &flows.Rule{Kind: "NetworkPolicy", Namespace: "default", Name: "fl-servers", Direction: "ingress", Index: -1, Action: "Deny"}
	admin := &flows.Rule{Kind: "ClusterNetworkPolicy", Tier: "Admin", Name: "fl-admin-deny", Direction: "ingress", Index: 0, Action: "Deny"}
	cases := []flowCase{
		{name: "TCP same node, allowed", src: "fl-c1", dst: "fl-s1", sport: 41001, protocol: "TCP", verdict: flows.Forwarded, rule: allow},
		{name: "TCP across nodes, allowed", src: "fl-c1", dst: "fl-s2", sport: 41002, protocol: "TCP", verdict: flows.Forwarded, rule: allow},
		{name: "UDP across nodes, allowed", src: "fl-c1", dst: "fl-s2", sport: 41003, protocol: "UDP", verdict: flows.Forwarded, rule: allow},
		{name: "TCP same node, denied by NetworkPolicy", src: "fl-c2", dst: "fl-s2", sport: 41004, protocol: "TCP", verdict: flows.DroppedPolicy, rule: isolate},
		{name: "UDP across nodes, denied by NetworkPolicy", src: "fl-c2", dst: "fl-s1", sport: 41005, protocol: "UDP", verdict: flows.DroppedPolicy, rule: isolate},
		{name: "TCP across nodes, denied by Admin CNP", src: "fl-c1", dst: "fl-x", sport: 41006, protocol: "TCP", verdict: flows.DroppedPolicy, rule: admin},
	}
	for i := range cases {
		fc := &cases[i]
		fc.srcIP = p[fc.src].ip
		fc.node = p[fc.dst].node // the ingress side decides every case
		src, dst := p[fc.src], p[fc.dst].ip
		var err error
		reached := false
		if fc.protocol == "TCP" {
			err = tcpDial(src, dst, int(fc.sport))
			reached = err == nil
		} else {
			reached, err = udpSend(src, dst, int(fc.sport), time.Second)
			if err == nil && !reached {
				err = fmt.Errorf("no echo")
			}
		}
		if want := fc.verdict == flows.Forwarded; reached != want {
			t.Fatalf("%s: reached %v, want %v (%v)", fc.name, reached, want, err)
		}
	}
	return append(cases, w.forged(t))
}

// forged sends UDP from fl-c1's eth0 to fl-c2 (on the other node, a pod
// no policy isolates) with a source no pod holds, as raw frames: the
// guard on fl-c1's node drops them and records it.
func (w *flowWorld) forged(t *testing.T) flowCase {
	t.Helper()
	c1, c2 := w.pods["fl-c1"], w.pods["fl-c2"]
	forged := netip.MustParseAddr("198.18.200.9")
	var mac net.HardwareAddr
	if err := c1.ns.Do(func() error {
		ifc, err := net.InterfaceByName("eth0")
		if err == nil {
			mac = ifc.HardwareAddr
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	got := testutil.UDPArrivals(t, c1.ns.Path(), c2.ns.Path(), mac, dataplane.RoutedHostMAC, c2.ip, []netip.Addr{c1.ip, forged}, 3)
	if got[c1.ip] == 0 || got[forged] != 0 {
		t.Fatalf("raw frames from fl-c1: arrived by source %v: want fl-c1's own, never %s", got, forged)
	}
	return flowCase{name: "UDP forged source, dropped by the guard", dst: "fl-c2", srcIP: forged, protocol: "UDP",
		verdict: flows.DroppedGuard, node: c1.node}
}

// flowsJSON runs `podnet flows --kubeconfig ... -o json ARGS` on node 1
// and reads its records.
func (w *flowWorld) flowsJSON(ctx context.Context, args ...string) ([]flows.Record, error) {
	out, err := w.c.Nodes[0].Podnet(ctx, append([]string{"flows", "--kubeconfig", w.kc, "-o", "json"}, args...)...)
	if err != nil {
		return nil, err
	}
	var recs []flows.Record
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var r flows.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("a line of podnet flows: %v: %s", err, sc.Bytes())
		}
		recs = append(recs, r)
	}
	return recs, sc.Err()
}

// waitRecorded polls podnet flows until every case has its record.
func (w *flowWorld) waitRecorded(ctx context.Context, t *testing.T, cases []flowCase) map[string]flows.Record {
	t.Helper()
	found := map[string]flows.Record{}
	waitUntil(ctx, t, "every scripted connection in podnet flows", time.Minute, func() error {
		recs, err := w.flowsJSON(ctx, "--limit", "5000")
		if err != nil {
			return err
		}
		var missing []string
		for _, fc := range cases {
			r, why := w.match(fc, recs)
			if why != "" {
				missing = append(missing, fc.name+": "+why)
				continue
			}
			found[fc.name] = r
		}
		if len(missing) > 0 {
			return fmt.Errorf("%d records read; missing:\n%s", len(recs), strings.Join(missing, "\n"))
		}
		return nil
	})
	return found
}

// match finds fc's Start record and checks it; why says what was wrong
// with the closest one.
func (w *flowWorld) match(fc flowCase, recs []flows.Record) (flows.Record, string) {
	dst := w.pods[fc.dst]
	why := "no record of it"
	for _, r := range recs {
		if r.Event != flows.Start || r.Src.IP != fc.srcIP || r.Dst.IP != dst.ip || r.Protocol != fc.protocol ||
			(fc.sport != 0 && r.Src.Port != fc.sport) || r.Node != fc.node {
			continue
		}
		switch {
		case r.Verdict != fc.verdict:
			why = "verdict " + string(r.Verdict)
		case fc.rule != nil && !slices.ContainsFunc(r.Rules, func(x flows.Rule) bool { return x == *fc.rule }):
			why = fmt.Sprintf("rules %+v", r.Rules)
		case r.Dst.PodKey() != "default/"+fc.dst || (fc.src != "" && r.Dst.Port != flowServerPort):
			why = fmt.Sprintf("destination %+v", r.Dst)
		case fc.src != "" && r.Src.PodKey() != "default/"+fc.src:
			why = fmt.Sprintf("source %+v", r.Src)
		case fc.src == "" && r.Src.Pod != "":
			why = fmt.Sprintf("a forged source named pod %s", r.Src.PodKey())
		default:
			return r, ""
		}
	}
	return flows.Record{}, why
}

func describeRecord(r flows.Record) string {
	b, _ := json.Marshal(r)
	return string(b)
}
