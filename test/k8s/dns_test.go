package k8s_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/test/k8s/cluster"
	"github.com/podnet/podnet/test/k8s/ociimage"
)

// dnsqueryImage is cmd/dnsquery's image, built by the test.
const dnsqueryImage = "podnet.test/dnsquery:1"

// dnsAnswer is what a query must get: these answers, or NXDOMAIN.
type dnsAnswer struct {
	query    string
	want     []string
	notFound bool
}

// TestDNS deploys podnet and the cluster's DNS (CoreDNS, DeployDNS) on
// one node and resolves the cluster's names: over UDP and TCP from the
// node, at every CoreDNS pod and at the kube-dns Service's address
// (through kube-proxy), and from a ClusterFirst pod through its own
// resolv.conf, which names that Service; Services, a Service's reverse
// name, a pod's name, the search path, and a name outside the cluster,
// which must be NXDOMAIN without any DNS packet leaving the node.
func TestDNS(t *testing.T) {
	c := cluster.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	step := steps(t)
	if err := c.Deploy(ctx, cluster.Default, nil); err != nil {
		t.Fatal(err)
	}
	waitNodeReady(ctx, t, c, c.Nodes[0].Name, 3*time.Minute)
	leaving := countDNSLeaving(t, c.Nodes[0])
	if err := c.DeployDNS(ctx); err != nil {
		t.Fatal(err)
	}
	servers := corednsPodIPs(ctx, t, c)

	step("Service", func(t *testing.T) { checkDNSService(ctx, t, c, servers) })

	// A pod's name is its address with dashes (pods insecure: any
	// address of the form answers).
	podName := strings.ReplaceAll(servers[0], ".", "-") + ".default.pod." + cluster.ClusterDomain
	step("FromNode", func(t *testing.T) {
		want := []dnsAnswer{
			{query: "kubernetes.default.svc.cluster.local.", want: []string{cluster.KubernetesServiceIP}},
			{query: "kube-dns.kube-system.svc.cluster.local.", want: []string{cluster.DNSServiceIP}},
			{query: podName + ".", want: []string{servers[0]}},
			{query: "ptr:" + cluster.KubernetesServiceIP, want: []string{"kubernetes.default.svc.cluster.local."}},
			{query: "ptr:192.0.2.1", notFound: true},
			{query: "example.com.", notFound: true},
		}
		// kube-proxy programs the Service a moment after its
		// endpoints turn ready, and rejects its packets until then;
		// before it has seen the Service at all, a query to its
		// address would take the node's default route, out of the
		// underlay, and be counted as leaving: so no query is sent
		// before kube-proxy's rules name the address.
		waitUntil(ctx, t, "kube-proxy's rules naming the kube-dns Service", 30*time.Second, func() error {
			if rules := proxyRules(c, c.Nodes[0].Name); !strings.Contains(rules, cluster.DNSServiceIP) {
				return fmt.Errorf("%s not in them yet", cluster.DNSServiceIP)
			}
			return nil
		})
		waitUntil(ctx, t, "kube-proxy serving the kube-dns Service", 30*time.Second, func() error {
			for _, network := range []string{"udp", "tcp"} {
				if res := lookup(ctx, nodeResolver(c.Nodes[0], cluster.DNSServiceIP, network), want[0].query); res.Error != "" {
					return errors.New(res.Error)
				}
			}
			return nil
		})
		for _, server := range append([]string{cluster.DNSServiceIP}, servers...) {
			for _, network := range []string{"udp", "tcp"} {
				r := nodeResolver(c.Nodes[0], server, network)
				for _, w := range want {
					checkAnswer(t, server+" over "+network, w, lookup(ctx, r, w.query))
				}
			}
		}
	})

	step("FromPod", func(t *testing.T) {
		loadDNSQueryImage(t, c)
		args := []string{"-resolv-conf"}
		want := []dnsAnswer{
			// The search path of a ClusterFirst pod in namespace default.
			{query: "kubernetes.default", want: []string{cluster.KubernetesServiceIP}},
			{query: "kubernetes", want: []string{cluster.KubernetesServiceIP}},
			{query: "kube-dns.kube-system", want: []string{cluster.DNSServiceIP}},
			{query: "kubernetes.default.svc.cluster.local", want: []string{cluster.KubernetesServiceIP}},
			{query: "kube-dns.kube-system.svc.cluster.local", want: []string{cluster.DNSServiceIP}},
			{query: podName, want: []string{servers[0]}},
			{query: "ptr:" + cluster.KubernetesServiceIP, want: []string{"kubernetes.default.svc.cluster.local."}},
			{query: "example.com", notFound: true},
		}
		for _, w := range want {
			args = append(args, w.query)
		}
		resolvConf, results := runDNSQuery(ctx, t, c, "dnsquery", args)
		for _, line := range []string{
			"nameserver " + cluster.DNSServiceIP,
			"search default.svc.cluster.local svc.cluster.local cluster.local",
			"options ndots:5",
		} {
			if !slices.Contains(strings.Split(resolvConf, "\n"), line) {
				t.Errorf("the pod's resolv.conf has no line %q:\n%s", line, resolvConf)
			}
		}
		if strings.Count(resolvConf, "nameserver") != 1 {
			t.Errorf("the pod's resolv.conf names other nameservers than the cluster's:\n%s", resolvConf)
		}
		for _, w := range want {
			got, ok := results[w.query]
			if !ok {
				t.Errorf("%s: no answer in the pod's log", w.query)
				continue
			}
			checkAnswer(t, "pod", w, got)
		}
	})

	if n := leaving(); n != 0 {
		t.Errorf("%d DNS packets left the node by its underlay", n)
	}
}

// dnsResult is one line of dnsquery's output.
type dnsResult struct {
	Query    string   `json:"query"`
	Answers  []string `json:"answers"`
	Error    string   `json:"error"`
	NotFound bool     `json:"notFound"`
}

// nodeResolver resolves from n's network namespace, asking server over
// network (udp or tcp: the resolver frames its queries for whichever
// connection it gets).
func nodeResolver(n *cluster.Node, server, network string) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		// The address the resolver asks for is the machine's
		// nameserver; this one is the cluster's.
		return n.DialContext(ctx, network, net.JoinHostPort(server, "53"))
	}}
}

// lookup resolves a query as dnsquery does: a name as a host, ptr:ADDR by
// address.
func lookup(ctx context.Context, r *net.Resolver, query string) dnsResult {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res := dnsResult{Query: query}
	var err error
	if addr, ok := strings.CutPrefix(query, "ptr:"); ok {
		res.Answers, err = r.LookupAddr(ctx, addr)
	} else {
		res.Answers, err = r.LookupHost(ctx, query)
	}
	if err != nil {
		res.Error = err.Error()
		var dnsErr *net.DNSError
		res.NotFound = errors.As(err, &dnsErr) && dnsErr.IsNotFound
	}
	return res
}

func checkAnswer(t *testing.T, from string, w dnsAnswer, got dnsResult) {
	t.Helper()
	switch {
	case w.notFound && !got.NotFound:
		t.Errorf("%s: %s: got %v %s, want NXDOMAIN", from, w.query, got.Answers, got.Error)
	case !w.notFound && (got.Error != "" || !slices.Equal(got.Answers, w.want)):
		t.Errorf("%s: %s: got %v %s, want %v", from, w.query, got.Answers, got.Error, w.want)
	}
}

// corednsPodIPs returns the addresses of the CoreDNS pods, all Ready.
func corednsPodIPs(ctx context.Context, t *testing.T, c *cluster.Cluster) []string {
	t.Helper()
	pods, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	if err != nil {
		t.Fatal(err)
	}
	var ips []string
	for _, p := range pods.Items {
		if !podReady(&p) || p.Status.PodIP == "" {
			t.Fatalf("CoreDNS pod %s not Ready: %s", p.Name, podSummary(&p))
		}
		ips = append(ips, p.Status.PodIP)
	}
	if len(ips) == 0 {
		t.Fatal("no CoreDNS pod")
	}
	slices.Sort(ips)
	t.Logf("CoreDNS pods at %v", ips)
	return ips
}

// checkDNSService checks the kube-dns Service that the kubelet's
// clusterDNS names and upstream's e2e tests look up by label, and that
// its EndpointSlices, which kube-proxy programs, hold every CoreDNS pod
// on every DNS port.
func checkDNSService(ctx context.Context, t *testing.T, c *cluster.Cluster, servers []string) {
	svcs, err := c.Client.CoreV1().Services("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	if err != nil {
		t.Fatal(err)
	}
	if len(svcs.Items) != 1 || svcs.Items[0].Name != "kube-dns" || svcs.Items[0].Spec.ClusterIP != cluster.DNSServiceIP {
		t.Fatalf("services labelled k8s-app=kube-dns: %v, want kube-dns at %s", svcs.Items, cluster.DNSServiceIP)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		list, err := c.Client.DiscoveryV1().EndpointSlices("kube-system").List(ctx,
			metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=kube-dns"})
		if err != nil {
			t.Fatal(err)
		}
		got, ports := readyEndpoints(list.Items)
		if fmt.Sprint(got) == fmt.Sprint(servers) && ports == "dns 53/UDP, dns-tcp 53/TCP, metrics 9153/TCP" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-dns endpoints: %v on ports %s, want %v on dns, dns-tcp and metrics", got, ports, servers)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// readyEndpoints returns the sorted ready addresses of the slices and
// their ports.
func readyEndpoints(items []discoveryv1.EndpointSlice) ([]string, string) {
	var addrs, ports []string
	for _, s := range items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && *e.Conditions.Ready {
				addrs = append(addrs, e.Addresses...)
			}
		}
		for _, p := range s.Ports {
			if p.Name != nil && p.Port != nil && p.Protocol != nil {
				ports = append(ports, fmt.Sprintf("%s %d/%s", *p.Name, *p.Port, *p.Protocol))
			}
		}
	}
	slices.Sort(addrs)
	slices.Sort(ports)
	return addrs, strings.Join(slices.Compact(ports), ", ")
}

// loadDNSQueryImage builds cmd/dnsquery statically and loads it, the one
// file of dnsqueryImage, into every node.
func loadDNSQueryImage(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "dnsquery")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/dnsquery")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/dnsquery: %v\n%s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var archive bytes.Buffer
	if err := ociimage.Write(&archive, ociimage.Image{
		Name: dnsqueryImage, Entrypoint: []string{"/dnsquery"},
		Files: []ociimage.File{{Path: "/dnsquery", Mode: 0o755, Data: data}},
	}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "dnsquery.tar")
	if err := os.WriteFile(path, archive.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.LoadImages(path); err != nil {
		t.Fatal(err)
	}
}

// runDNSQuery runs dnsquery in a ClusterFirst pod (the default policy)
// until it exits and returns the pod's resolv.conf and its answers by
// query.
func runDNSQuery(ctx context.Context, t *testing.T, c *cluster.Cluster, name string, args []string) (string, map[string]dnsResult) {
	t.Helper()
	no := false
	grace := int64(2)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  &no,
			TerminationGracePeriodSeconds: &grace,
			RestartPolicy:                 corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "dnsquery", Image: dnsqueryImage, ImagePullPolicy: corev1.PullNever, Args: args,
			}},
		},
	}
	logs := podFetch(ctx, t, c, pod)
	t.Logf("pod %s:\n%s", name, logs)
	var resolvConf string
	results := map[string]dnsResult{}
	sc := bufio.NewScanner(strings.NewReader(logs))
	for sc.Scan() {
		var line struct {
			ResolvConf *string `json:"resolvConf"`
			dnsResult
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("pod %s: %q: %v", name, sc.Text(), err)
		}
		if line.ResolvConf != nil {
			resolvConf = *line.ResolvConf
			continue
		}
		results[line.Query] = line.dnsResult
	}
	return resolvConf, results
}

// countDNSLeaving counts, in an nftables table of the test's in the
// node's network namespace, the DNS packets (UDP or TCP to port 53) that
// leave the node by its underlay link, the way to everything outside the
// node; the count starts at 0 now, after a check that the counter sees
// one sent, and is read by the function returned.
// The node's pods and CoreDNS are all on the node, so any such packet is
// a query sent off it.
func countDNSLeaving(t *testing.T, n *cluster.Node) func() uint64 {
	t.Helper()
	fd, err := os.Open(n.NetNS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fd.Close() })
	conn, err := nftables.New(nftables.WithNetNSFd(int(fd.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	table := conn.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "podnet-test-dns-leaving"})
	chain := conn.AddChain(&nftables.Chain{Name: "postrouting", Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityFilter})
	ifname := make([]byte, unix.IFNAMSIZ)
	copy(ifname, "underlay0")
	for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
		// oifname "underlay0" meta l4proto udp|tcp th dport 53 counter
		conn.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname},
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0, 53}},
			&expr.Counter{},
		}})
	}
	if err := conn.Flush(); err != nil {
		t.Fatalf("nftables on %s: %v", n.Name, err)
	}
	t.Cleanup(func() {
		conn.DelTable(table)
		_ = conn.Flush() // the table goes with the namespace anyway
	})
	count := func() uint64 {
		rules, err := conn.GetRules(table, chain)
		if err != nil {
			t.Fatalf("nftables on %s: %v", n.Name, err)
		}
		var packets uint64
		for _, r := range rules {
			for _, e := range r.Exprs {
				if c, ok := e.(*expr.Counter); ok {
					packets += c.Packets
				}
			}
		}
		return packets
	}
	// The counter must see a query that leaves: one datagram to port 53
	// of the switch's address, where nothing listens, counts once.
	err = netns.Do(n.NetNS, func() error {
		probe, err := net.Dial("udp", net.JoinHostPort(cluster.OutsideIP, "53"))
		if err != nil {
			return err
		}
		defer probe.Close()
		_, err = probe.Write([]byte("podnet test: not a query"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := count(); got != 1 {
		t.Fatalf("the leak counter on %s saw %d packets of one sent to %s:53", n.Name, got, cluster.OutsideIP)
	}
	return func() uint64 { return count() - 1 }
}
