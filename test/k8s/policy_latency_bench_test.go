package k8s_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// BenchmarkPolicyLatency's default rounds: policy created and deleted
// (PODNET_POLICY_LATENCY_N sets another number), and pods created of
// each kind (PODNET_POLICY_LATENCY_PODS). A policy round takes about half
// a second, a pod round two to eight, most of it the server's container
// starting and the pod's deletion. The whole benchmark, three clusters,
// took 25 minutes on the project's 2-core VM at load average 50-80;
// about ten are expected when it is quiet.
const (
	policyLatencyRounds    = 100
	policyLatencyPodRounds = 20
)

// latencyRole is the label that says what a pod of the benchmark is
// for; the policies select by it.
const latencyRole = "podnet-latency"

// latencyChain is a pod network BenchmarkPolicyLatency measures, on a
// two-node cluster of its own.
type latencyChain struct {
	name string
	// variant is podnet's deployment; reference is the reference chain
	// instead, which enforces no policy; kubeRouter is podnet's default
	// deployment without its policy service and kube-router's policy
	// controller over it, the peer that enforces policy instead.
	variant    cluster.Variant
	reference  bool
	kubeRouter bool
}

// latencyConfig is what every chain is measured with.
type latencyConfig struct {
	policyRounds, podRounds int
	background              []latencyBackground
}

// latencyBackground is a kind of object created before anything is
// measured, beside the benchmark's own: what a real cluster holds, that
// selects none of the measured pods but that the agent still watches
// and compiles with every change. create makes object i of count.
// podnetOnly kinds are not made for the reference chain, whose cluster
// does not serve them, nor for kube-router, which does not enforce them.
type latencyBackground struct {
	kinds      string // plural, for the report
	count      int
	podnetOnly bool
	create     func(ctx context.Context, c *cluster.Cluster, i int) error
}

// latencyBackgrounds are NetworkPolicies (PODNET_POLICY_LATENCY_BACKGROUND
// of them, none by default) in the measured pods' namespace and
// ClusterNetworkPolicies (PODNET_POLICY_LATENCY_BACKGROUND_CNP, none by
// default; podnet's chains only: the CRD comes with its deployment).
func latencyBackgrounds(b *testing.B) []latencyBackground {
	return []latencyBackground{
		{kinds: "NetworkPolicies", count: latencyEnv(b, "PODNET_POLICY_LATENCY_BACKGROUND", 0, 0), create: createBackgroundPolicy},
		{kinds: "ClusterNetworkPolicies", count: latencyEnv(b, "PODNET_POLICY_LATENCY_BACKGROUND_CNP", 0, 0),
			podnetOnly: true, create: createBackgroundClusterPolicy},
	}
}

// BenchmarkPolicyLatency takes issue 22's two latency figures on two
// real nodes (kubernetes/perf-tests calls them
// policy_enforcement_latency_policy_creation and
// pod_creation_reachability_latency), for podnet as deployed from
// deploy/kubernetes (model A), from deploy/kubernetes/blocks (model B),
// for the reference chain (containernetworking/plugins bridge,
// host-local, portmap), and for kube-router's policy controller over
// podnet without its policy service (the peer, kube-router), each on a
// fresh cluster:
//
//   - policy created → enforced on every node: a server pod and a client
//     pod on each node; the test probes every server from every client
//     (a TCP connect from inside the client's network namespace every 5
//     ms, 50 ms to answer). A NetworkPolicy denying the servers' ingress
//     is created; a node enforces it from the start of the first of the
//     probes to its server that, with every later one, went unanswered
//     (a drop), counted from the create call's return; the policy is
//     enforced once both nodes do. Then it is deleted, and the same from
//     the delete's return to every probe connecting again. Rounds
//     alternate the two. The reference chain has no such phase.
//   - pod created → reachable from an allowed peer on the other node: a
//     `podnet diag serve` pod is created (through the scheduler, on one
//     node, alternately), selected by a NetworkPolicy that allows its
//     ingress from the client pods (target "selected"), or labelled so
//     that no policy selects it ("unselected"). Its address comes from
//     the CNI result cache of its node, which libcni writes right after
//     the chain's ADD returned: the file's modification time is "ADD
//     returned". From then on the client on the other node probes it:
//     the first answer (a reset from the pod's stack, before its server
//     listens, or a SYN-ACK) is "reachable", the first accepted connect
//     "connected". Then the pod is deleted and gone before the next.
//
// Every figure is reported as p50 and p99 (nearest rank: of 20 pods the
// p99 is the slowest) in milliseconds, and the tables of all chains are
// logged at the end. PODNET_POLICY_LATENCY_N sets the policy rounds
// (100), PODNET_POLICY_LATENCY_PODS the pods of each kind (20),
// PODNET_POLICY_LATENCY_BACKGROUND a number of NetworkPolicies and
// PODNET_POLICY_LATENCY_BACKGROUND_CNP of ClusterNetworkPolicies created
// first that select none of the measured pods. After each chain the
// nodes must hold nothing of the deleted pods, and after each cluster's
// teardown nothing of it may be left.
//
// A benchmark, not a test; as root (ten to 25 minutes, see
// policyLatencyRounds):
//
//	cd test/k8s && CI=true go test -count=1 -run XXX -bench '^BenchmarkPolicyLatency$' -benchtime 1x -v -timeout 60m .
//
// -bench 'BenchmarkPolicyLatency/podnet$' runs one chain.
func BenchmarkPolicyLatency(b *testing.B) {
	cfg := latencyConfig{
		policyRounds: latencyEnv(b, "PODNET_POLICY_LATENCY_N", policyLatencyRounds, 1),
		podRounds:    latencyEnv(b, "PODNET_POLICY_LATENCY_PODS", policyLatencyPodRounds, 1),
		background:   latencyBackgrounds(b),
	}
	chains := []latencyChain{
		{name: "podnet", variant: cluster.Default},
		{name: "podnet-blocks", variant: cluster.Blocks},
		{name: "reference", reference: true},
		{name: "kube-router", variant: cluster.Default, kubeRouter: true},
	}
	var results []*latencyResult
	for _, ch := range chains {
		b.Run(ch.name, func(b *testing.B) {
			for range b.N {
				r := runPolicyLatency(b, ch, cfg)
				r.report(b)
				results = append(results, r)
			}
		})
	}
	if len(results) > 0 {
		b.Logf("NetworkPolicy latency on two nodes, %d policy rounds, %d pods of each kind (ms, p50 / p99):\n%s",
			cfg.policyRounds, cfg.podRounds, latencyTables(results))
	}
}

// latencyEnv reads a count from the environment, def if unset.
func latencyEnv(b *testing.B, name string, def, least int) int {
	b.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < least {
		b.Fatalf("%s=%q: want a number of at least %d", name, s, least)
	}
	return n
}

// runPolicyLatency measures one chain on a cluster of its own.
func runPolicyLatency(b *testing.B, ch latencyChain, cfg latencyConfig) *latencyResult {
	var c *cluster.Cluster
	// Registered before the cluster's own teardown, so it runs after it.
	b.Cleanup(func() {
		if c != nil {
			clusterLeftNothing(b, c)
		}
	})
	c = cluster.Start(b, cluster.WithNodes(2))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	installLatencyChain(ctx, b, c, ch)
	r := &latencyResult{chain: ch.name, reach: map[string]*reachSamples{}}
	for _, bg := range cfg.background {
		if bg.count == 0 || (bg.podnetOnly && (ch.reference || ch.kubeRouter)) {
			continue
		}
		start := time.Now()
		scaleParallel(ctx, b, bg.count, func(i int) error { return bg.create(ctx, c, i) })
		many := fmt.Sprintf("%d %s", bg.count, bg.kinds)
		b.Logf("%s: %s created in the background in %s", ch.name, many, time.Since(start).Round(time.Millisecond))
		r.background = append(r.background, many)
	}

	// A server and a client on each node, pinned.
	var servers, clients []*corev1.Pod
	for i, n := range c.Nodes {
		srv := onNode(n, diagPod(fmt.Sprintf("nplat-srv-%d", i+1), "serve", "--listen", fmt.Sprintf(":%d", diagPort)))
		srv.Labels[latencyRole] = "server"
		cl := onNode(n, burstPod(fmt.Sprintf("nplat-cl-%d", i+1), "nplat"))
		cl.Labels[latencyRole] = "client"
		for _, p := range []*corev1.Pod{srv, cl} {
			if _, err := c.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	for i := range c.Nodes {
		servers = append(servers, latencyWaitRunning(ctx, b, c, fmt.Sprintf("nplat-srv-%d", i+1)))
		clients = append(clients, latencyWaitRunning(ctx, b, c, fmt.Sprintf("nplat-cl-%d", i+1)))
	}
	var clientNS []*netns.NetNS
	for i, n := range c.Nodes {
		ns, err := podNetNS(ctx, n, clients[i])
		if err != nil {
			b.Fatal(err)
		}
		defer ns.Close()
		clientNS = append(clientNS, ns)
	}

	if !ch.reference {
		start := time.Now()
		enforcementRounds(ctx, b, c, clientNS, servers, cfg.policyRounds, r)
		b.Logf("%s: %d policy rounds in %s", ch.name, cfg.policyRounds, time.Since(start).Round(time.Second))
		if _, err := c.Client.NetworkingV1().NetworkPolicies("default").Create(ctx, allowClientsPolicy(), metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	reachRounds(ctx, b, c, ch, clientNS, cfg.podRounds, r)
	b.Logf("%s: %d pod rounds of %v in %s", ch.name, cfg.podRounds, r.cases, time.Since(start).Round(time.Second))

	var names []string
	for _, p := range append(servers, clients...) {
		names = append(names, p.Name)
	}
	deleteLatencyPods(ctx, b, c, names...)
	if err := c.Client.NetworkingV1().NetworkPolicies("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		b.Fatal(err)
	}
	nodesKeepNoPods(ctx, b, c)
	return r
}

// installLatencyChain puts the chain on the cluster and waits until both
// nodes are Ready and, for podnet, an agent is ready on each.
func installLatencyChain(ctx context.Context, b *testing.B, c *cluster.Cluster, ch latencyChain) {
	var err error
	switch {
	case ch.reference:
		err = c.InstallReferenceChain(ctx, b.Logf)
	case ch.kubeRouter:
		err = c.Deploy(ctx, ch.variant, kubeRouterPeer(nil))
	default:
		err = c.Deploy(ctx, ch.variant, nil)
	}
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range c.Nodes {
		waitNodeReady(ctx, b, c, n.Name, 3*time.Minute)
	}
	if ch.reference {
		return
	}
	latencyWait(b, "a ready podnet agent on every node", 3*time.Minute, func() error {
		list, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: agentSelector})
		if err != nil {
			return err
		}
		ready := 0
		for i := range list.Items {
			if podReady(&list.Items[i]) {
				ready++
			}
		}
		if ready < len(c.Nodes) {
			return fmt.Errorf("%d of %d agents ready", ready, len(c.Nodes))
		}
		return nil
	})
	if ch.kubeRouter {
		if err := c.InstallKubeRouter(ctx, b.Logf); err != nil {
			b.Fatal(err)
		}
	}
}

// latencyPair is one client probing one server.
type latencyPair struct {
	client, server int // node indexes; the server's node enforces ingress
	log            *probeLog
}

// enforcementRounds creates and deletes the policy that denies the
// servers' ingress, rounds times, while every client probes every
// server.
func enforcementRounds(ctx context.Context, b *testing.B, c *cluster.Cluster, clients []*netns.NetNS, servers []*corev1.Pod, rounds int, r *latencyResult) {
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
	}()
	var pairs []latencyPair
	for ci, ns := range clients {
		for si, s := range servers {
			dst := netip.AddrPortFrom(netip.MustParseAddr(s.Status.PodIP), diagPort)
			pairs = append(pairs, latencyPair{client: ci, server: si, log: probePair(pctx, &wg, ns, dst)})
		}
	}
	// Every server open to every client first.
	waitVerdict(ctx, b, pairs, time.Now(), probeConnected, 2*time.Minute)
	policies := c.Client.NetworkingV1().NetworkPolicies("default")
	r.enforcedNode = make([][]time.Duration, len(c.Nodes))
	for range rounds {
		// Not in step with anything periodic on the nodes.
		time.Sleep(100*time.Millisecond + rand.N(100*time.Millisecond))
		called := time.Now()
		if _, err := policies.Create(ctx, denyServersPolicy(), metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		returned := time.Now()
		r.createCall = append(r.createCall, returned.Sub(called))
		since := waitVerdict(ctx, b, pairs, called, probeDropped, time.Minute)
		perNode := make([]time.Duration, len(c.Nodes))
		for i := range perNode {
			perNode[i] = -time.Hour
		}
		for j, p := range pairs {
			perNode[p.server] = max(perNode[p.server], since[j].Sub(returned))
		}
		all := -time.Hour
		for i, d := range perNode {
			r.enforcedNode[i] = append(r.enforcedNode[i], d)
			all = max(all, d)
		}
		r.enforced = append(r.enforced, all)

		called = time.Now()
		if err := policies.Delete(ctx, "nplat-deny", metav1.DeleteOptions{}); err != nil {
			b.Fatal(err)
		}
		returned = time.Now()
		since = waitVerdict(ctx, b, pairs, called, probeConnected, time.Minute)
		open := -time.Hour
		for j := range pairs {
			open = max(open, since[j].Sub(returned))
		}
		r.reopened = append(r.reopened, open)
	}
	for _, p := range pairs {
		if n, err := p.log.failures(); n > 0 {
			b.Errorf("client on node %d to server on node %d: %d probes failed, the first with %v", p.client+1, p.server+1, n, err)
		}
	}
}

// waitVerdict waits until every pair's probes since from have settled on
// want, and returns since when, pair by pair.
func waitVerdict(ctx context.Context, b *testing.B, pairs []latencyPair, from time.Time, want probeResult, timeout time.Duration) []time.Time {
	b.Helper()
	since := make([]time.Time, len(pairs))
	deadline := time.Now().Add(timeout)
	for {
		settled := 0
		for j, p := range pairs {
			var ok bool
			if since[j], ok = p.log.settledSince(from, want); ok {
				settled++
			}
		}
		if settled == len(pairs) {
			return since
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			b.Fatalf("%d of %d client-server pairs settled on verdict %d %s after the change", settled, len(pairs), want, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reachCase is a kind of pod whose reachability is measured.
type reachCase struct {
	name, role string
	// selected: a policy selects the pod (podnet only; the reference
	// chain enforces none, so it only has the other case).
	selected bool
}

var reachCases = []reachCase{{"selected", "target", true}, {"unselected", "open", false}}

// reachRounds measures each case rounds times, interleaved so that the
// machine's load drifts over both alike; round i's pod is on node i mod
// 2 and probed from the client on the other node.
func reachRounds(ctx context.Context, b *testing.B, c *cluster.Cluster, ch latencyChain, clients []*netns.NetNS, rounds int, r *latencyResult) {
	for i := range rounds {
		target := i % len(c.Nodes)
		for _, rc := range reachCases {
			if rc.selected && ch.reference {
				continue
			}
			s := r.reach[rc.name]
			if s == nil {
				s = &reachSamples{}
				r.reach[rc.name] = s
				r.cases = append(r.cases, rc.name)
			}
			name := fmt.Sprintf("nplat-%s-%d", rc.role, i)
			reachOnce(ctx, b, c, clients[len(c.Nodes)-1-target], c.Nodes[target], name, rc.role, s)
		}
	}
}

// reachOnce creates the pod, finds its address when its ADD returns,
// probes it from client until a connect is accepted, and deletes it.
func reachOnce(ctx context.Context, b *testing.B, c *cluster.Cluster, client *netns.NetNS, node *cluster.Node, name, role string, s *reachSamples) {
	p := diagPod(name, "serve", "--listen", fmt.Sprintf(":%d", diagPort))
	p.Labels[latencyRole] = role
	p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node.Name}
	created := time.Now()
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	added, err := waitCNIAdded(ctx, node, "default", name, 2*time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	probes, err := probeUntilConnected(ctx, client, netip.AddrPortFrom(added.ip, diagPort), 2*time.Minute)
	if err != nil {
		b.Fatalf("pod %s (%s on %s): %v", name, added.ip, node.Name, err)
	}
	var answered, connected time.Time
	for _, pr := range probes {
		if pr.answered() && (answered.IsZero() || pr.end.Before(answered)) {
			answered = pr.end
		}
		if pr.result == probeConnected && (connected.IsZero() || pr.end.Before(connected)) {
			connected = pr.end
		}
	}
	for _, pr := range probes {
		switch {
		case pr.result == probeDropped && pr.start.Before(answered):
			s.dropped++
		case pr.result == probeFailed:
			s.failed++
		}
	}
	s.added = append(s.added, added.at.Sub(created))
	s.noticed = append(s.noticed, added.seen.Sub(added.at))
	s.addReach = append(s.addReach, answered.Sub(added.at))
	s.addConnect = append(s.addConnect, connected.Sub(added.at))
	s.connect = append(s.connect, connected.Sub(created))
	// Gone from the API and its DEL done (libcni removes the cache
	// entry), so that the next round starts on a quiet node.
	deleteLatencyPods(ctx, b, c, name)
	latencyWait(b, name+"'s CNI DEL", time.Minute, func() error {
		if _, err := os.Stat(added.file); !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s still there (%v)", added.file, err)
		}
		return nil
	})
}

// probeUntilConnected probes dst from ns every probeEvery until a
// connect is accepted, and returns every probe once all have ended.
func probeUntilConnected(ctx context.Context, ns *netns.NetNS, dst netip.AddrPort, timeout time.Duration) ([]probe, error) {
	var (
		mu     sync.Mutex
		probes []probe
		wg     sync.WaitGroup
		once   sync.Once
	)
	connected := make(chan struct{})
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	deadline := time.After(timeout)
	var err error
loop:
	for {
		wg.Go(func() {
			p := dialFrom(ns, dst, probeTimeout)
			mu.Lock()
			probes = append(probes, p)
			mu.Unlock()
			if p.result == probeConnected {
				once.Do(func() { close(connected) })
			}
		})
		select {
		case <-connected:
			break loop
		case <-deadline:
			err = fmt.Errorf("no connect to %s accepted within %s", dst, timeout)
			break loop
		case <-ctx.Done():
			err = ctx.Err()
			break loop
		case <-tick.C:
		}
	}
	wg.Wait()
	return probes, err
}

// denyServersPolicy isolates the servers for ingress and allows none.
func denyServersPolicy() *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "nplat-deny", Namespace: "default"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{latencyRole: "server"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		},
	}
}

// allowClientsPolicy selects the "selected" targets and allows their
// ingress on the server's port from the client pods.
func allowClientsPolicy() *networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	port := intstr.FromInt32(diagPort)
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "nplat-allow", Namespace: "default"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{latencyRole: "target"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{latencyRole: "client"}}}},
			}},
		},
	}
}

// createBackgroundPolicy creates background NetworkPolicy i: in the
// measured pods' namespace, shaped like BenchmarkPolicyScale's (ingress
// on a port from the clients and from an ipBlock with an except, egress
// to the namespace), selecting pods labelled podnet-latency-bg, which
// the benchmark does not run.
func createBackgroundPolicy(ctx context.Context, c *cluster.Cluster, i int) error {
	tcp := corev1.ProtocolTCP
	port := intstr.FromInt32(diagPort)
	p := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("nplat-bg-%d", i), Namespace: "default"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{latencyRole + "-bg": strconv.Itoa(i % 20)}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
				From: []networkingv1.NetworkPolicyPeer{
					{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{latencyRole: "client"}}},
					{IPBlock: &networkingv1.IPBlock{CIDR: "172.16.0.0/12", Except: []string{fmt.Sprintf("172.16.%d.0/24", i%256)}}},
				},
			}},
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}},
			}},
		},
	}
	_, err := c.Client.NetworkingV1().NetworkPolicies("default").Create(ctx, p, metav1.CreateOptions{})
	return err
}

// createBackgroundClusterPolicy creates background ClusterNetworkPolicy
// i: Admin tier at priority i, its subject the pods
// createBackgroundPolicy's policies select (none that the benchmark
// runs), denying ingress from pods of a label of its own (none), passing
// ingress from every namespace's pods to NetworkPolicy, and accepting
// egress to the cluster's pods.
func createBackgroundClusterPolicy(ctx context.Context, c *cluster.Cluster, i int) error {
	return createClusterPolicy(ctx, c, fmt.Sprintf("nplat-bg-cnp-%d", i), map[string]any{
		"tier":     "Admin",
		"priority": int64(i),
		"subject": map[string]any{"pods": map[string]any{
			"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "default"}},
			"podSelector":       map[string]any{"matchLabels": map[string]any{latencyRole + "-bg": strconv.Itoa(i % 20)}},
		}},
		"ingress": []any{
			map[string]any{"name": "deny-peers", "action": "Deny",
				"from": []any{map[string]any{"pods": map[string]any{
					"namespaceSelector": map[string]any{},
					"podSelector":       map[string]any{"matchLabels": map[string]any{latencyRole + "-bg-peer": strconv.Itoa(i)}},
				}}}},
			map[string]any{"name": "pass-pods", "action": "Pass",
				"from": []any{map[string]any{"namespaces": map[string]any{}}}},
		},
		"egress": []any{
			map[string]any{"name": "accept-pods", "action": "Accept",
				"to": []any{map[string]any{"namespaces": map[string]any{}}}},
		},
	})
}

// latencyWaitRunning waits until pod default/name runs and returns it.
func latencyWaitRunning(ctx context.Context, b *testing.B, c *cluster.Cluster, name string) *corev1.Pod {
	b.Helper()
	var p *corev1.Pod
	latencyWait(b, name+" Running", 3*time.Minute, func() error {
		var err error
		if p, err = c.Client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("%s", podSummary(p))
		}
		return nil
	})
	return p
}

// deleteLatencyPods deletes the pods at once (no grace period) and
// waits until the API has none of them: their kubelet has stopped them.
func deleteLatencyPods(ctx context.Context, b *testing.B, c *cluster.Cluster, names ...string) {
	b.Helper()
	pods := c.Client.CoreV1().Pods("default")
	zero := int64(0)
	for _, name := range names {
		if err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
			b.Fatal(err)
		}
	}
	for _, name := range names {
		latencyWait(b, name+" gone", 2*time.Minute, func() error {
			_, err := pods.Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return err
			}
			return fmt.Errorf("still there")
		})
	}
}

// latencyWait polls cond every 100 ms until it returns nil, failing b
// with its last error after timeout.
func latencyWait(b *testing.B, what string, timeout time.Duration, cond func() error) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: not after %s: %v", what, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
