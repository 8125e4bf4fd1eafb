package k8s_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// libcniReader is the reader of cni.KnownReaders each containerd's libcni
// is (from its go.mod: 1.6.20 libcni 1.1.1, 1.7.35 1.1.2, 2.4.2 1.3.1):
// podnet's own account of which version each runtime runs its config at,
// which `podnet net validate` prints and this test holds to the truth.
var libcniReader = map[string]int{"1.6": 0, "1.7": 0, "2.x": 1}

// TestContainerdMatrix deploys podnet from deploy/kubernetes on a node
// running each containerd the harness has (Debian's 1.6; 1.7 and 2.x
// built from the module proxy) and checks that each one loads the
// conflist the agent installs, runs it at the CNI version podnet's
// readers table says, gives two pods addresses that reach each other, and
// tears them down without leaving anything. TestNode checks much more,
// on one containerd.
func TestContainerdMatrix(t *testing.T) {
	for _, cd := range cluster.Containerds {
		t.Run(cd.Name, func(t *testing.T) { checkContainerd(t, cd) })
	}
}

func checkContainerd(t *testing.T, cd cluster.Containerd) {
	c := cluster.Start(t, cluster.WithContainerd(cd))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var shipped string
	if err := c.Deploy(ctx, cluster.Default, func(m *cluster.Manifests) { shipped = m.ConfigMap.Data["10-podnet.conflist"] }); err != nil {
		t.Fatal(err)
	}
	waitNodeReady(ctx, t, c, c.Nodes[0].Name, 3*time.Minute)

	want := checkInstalledConflist(t, c.Nodes[0], shipped, cni.KnownReaders[libcniReader[cd.Name]])
	info, err := c.Nodes[0].RuntimeInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("containerd %s (CRI RuntimeVersion), lastCNILoadStatus %q", info.Version, info.CNILoadStatus)
	for _, cond := range info.Conditions {
		t.Logf("runtime condition %s=%v %s %s", cond.Type, cond.Status, cond.Reason, cond.Message)
	}
	if info.CNILoadStatus != "OK" {
		t.Errorf("containerd did not load the CNI config: %s", info.CNILoadStatus)
	}
	i := slices.IndexFunc(info.Networks, func(n cluster.CNINetwork) bool { return n.Name == "podnet" })
	if i < 0 {
		t.Fatalf("containerd loaded no podnet network: %+v", info.Networks)
	}
	if got := info.Networks[i].CNIVersion; got != want {
		t.Errorf("containerd runs podnet's network at CNI %s; podnet's readers table says %s", got, want)
	}

	a, cl := serverAndClient(ctx, t, c)
	pods := []*corev1.Pod{a, cl}
	sandboxes := map[string][]string{}
	for _, p := range pods {
		if sandboxes[p.Name], err = c.Nodes[0].SandboxIDs(ctx, string(p.UID)); err != nil {
			t.Fatal(err)
		}
	}
	if len(sandboxes[a.Name]) != 1 {
		t.Fatalf("pod %s has sandboxes %q, want one", a.Name, sandboxes[a.Name])
	}
	// The result of the server's ADD, which libcni caches: the version
	// the runtime asked the plugins for.
	if got := cachedResultVersion(t, c.Nodes[0], sandboxes[a.Name][0]); got != want {
		t.Errorf("pod %s: the cached CNI result is version %s, want %s", a.Name, got, want)
	}
	deletedSandboxesLeaveNothing(ctx, t, c, c.Nodes[0], pods, sandboxes)
}

// waitNodeReady waits until the node called name reports Ready.
func waitNodeReady(ctx context.Context, t testing.TB, c *cluster.Cluster, name string, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	var last string
	for time.Since(start) < timeout {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r := readyCondition(n); r != nil {
			if r.Status == corev1.ConditionTrue {
				t.Logf("node %s Ready after %s", name, time.Since(start).Round(100*time.Millisecond))
				return
			}
			last = fmt.Sprintf("%s %s: %s", r.Status, r.Reason, r.Message)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("node %s not Ready after %s: %s", name, timeout, last)
}

// checkInstalledConflist checks that the conflist the agent installed on
// n offers the versions the ConfigMap's does (cniVersion 1.0.0 and
// cniVersions), and returns the version reader runs it at.
func checkInstalledConflist(t *testing.T, n *cluster.Node, shipped string, reader cni.Reader) string {
	t.Helper()
	path := filepath.Join(n.CNIConfDir, "10-podnet.conflist")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the agent installed no config: %v", err)
	}
	type versions struct {
		CNIVersion  string   `json:"cniVersion"`
		CNIVersions []string `json:"cniVersions"`
	}
	var got, want versions
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if err := json.Unmarshal([]byte(shipped), &want); err != nil {
		t.Fatalf("configmap.yaml's conflist: %v", err)
	}
	if got.CNIVersion != want.CNIVersion || !slices.Equal(got.CNIVersions, want.CNIVersions) {
		t.Fatalf("installed conflist offers cniVersion %s, cniVersions %q; the ConfigMap's %s, %q",
			got.CNIVersion, got.CNIVersions, want.CNIVersion, want.CNIVersions)
	}
	installed, err := cni.ParseNetworkConfigList(data, path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := reader.VersionFor(installed)
	if err != nil {
		t.Fatalf("podnet's readers table says %s cannot run the installed conflist: %v", reader.Name, err)
	}
	t.Logf("installed conflist: cniVersion %s, cniVersions %q; %s runs it at %s", got.CNIVersion, got.CNIVersions, reader.Name, v)
	return v
}

// serverAndClient starts a server pod and a client pod that fetches from it, and
// checks the server saw the client's own address. It returns both.
func serverAndClient(ctx context.Context, t *testing.T, c *cluster.Cluster) (server, client *corev1.Pod) {
	t.Helper()
	pods := c.Client.CoreV1().Pods("default")
	if _, err := pods.Create(ctx, diagPod("diag-a", "serve", "--listen", fmt.Sprintf(":%d", diagPort)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	server = waitPod(ctx, t, c, "diag-a", corev1.PodRunning)
	url := fmt.Sprintf("http://%s:%d/", server.Status.PodIP, diagPort)
	if _, err := pods.Create(ctx, diagPod("diag-client", "get", "--timeout", "10s", url), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	client = waitPod(ctx, t, c, "diag-client", corev1.PodSucceeded)
	body, err := pods.GetLogs("diag-client", &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs of diag-client: %v", err)
	}
	if !strings.Contains(string(body), "to "+client.Status.PodIP+":") {
		t.Fatalf("diag-client got %q; want the answer to its own address %s", body, client.Status.PodIP)
	}
	t.Logf("pod %s -> pod %s (%s): %s", client.Status.PodIP, server.Name, server.Status.PodIP, strings.TrimSpace(string(body)))
	return server, client
}

// cachedResultVersion returns the cniVersion of the result libcni cached
// on n for the sandbox.
func cachedResultVersion(t *testing.T, n *cluster.Node, sandbox string) string {
	t.Helper()
	data, err := os.ReadFile(cniCacheEntry(n, sandbox))
	if err != nil {
		t.Fatal(err)
	}
	var entry struct {
		Result struct {
			CNIVersion string `json:"cniVersion"`
		} `json:"result"`
	}
	if err := json.Unmarshal(data, &entry); err != nil {
		t.Fatalf("libcni cache entry of sandbox %s: %v", sandbox, err)
	}
	return entry.Result.CNIVersion
}

// cniCacheEntry is n's libcni cache file of the sandbox's podnet network
// (results/<network>-<container ID>-<interface>).
func cniCacheEntry(n *cluster.Node, sandbox string) string {
	return filepath.Join(n.CNICacheDir, "results", "podnet-"+sandbox+"-eth0")
}

// deletedSandboxesLeaveNothing deletes the pods (n's) and checks that n
// keeps no veth, no route to their addresses, and no libcni cache entry
// of their sandboxes. Unlike deletedPodsLeaveNothing it finds cache
// entries by sandbox ID: the cache is the machine's, and another cluster
// running at the same time may have pods at the same addresses.
func deletedSandboxesLeaveNothing(ctx context.Context, t *testing.T, c *cluster.Cluster, n *cluster.Node, pods []*corev1.Pod, sandboxes map[string][]string) {
	t.Helper()
	for _, p := range pods {
		if err := c.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitNoDiagPods(ctx, t, c)
	// kubelet confirms a deletion once the sandbox is stopped, its CNI
	// DEL done; a veth can outlive that for as long as the kernel takes
	// to destroy the pod's namespace, which on a loaded machine is a
	// while ("Peer netns reference is invalid" until then).
	var left []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		left = podLeftovers(t, n, pods, sandboxes)
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	for _, l := range left {
		t.Error(l)
	}
}

// podLeftovers lists what the deleted pods left on n: veths, routes to their
// addresses, libcni cache entries of their sandboxes.
func podLeftovers(t *testing.T, n *cluster.Node, pods []*corev1.Pod, sandboxes map[string][]string) []string {
	t.Helper()
	var left []string
	for _, l := range nodeLines(t, n, "-o", "link", "show", "type", "veth") {
		if !strings.Contains(l, " underlay0@") {
			left = append(left, "veth left on the node: "+l)
		}
	}
	for _, l := range nodeLines(t, n, "-4", "route", "show") {
		for _, p := range pods {
			if strings.HasPrefix(l, p.Status.PodIP+" ") {
				left = append(left, fmt.Sprintf("route to deleted pod %s left: %s", p.Name, l))
			}
		}
	}
	for name, ids := range sandboxes {
		for _, id := range ids {
			if _, err := os.Stat(cniCacheEntry(n, id)); err == nil {
				left = append(left, fmt.Sprintf("CNI cache entry of deleted pod %s left: %s", name, cniCacheEntry(n, id)))
			}
		}
	}
	return left
}

// nodeLines returns the lines `ip ARGS` prints on stdout in n's
// namespaces. Its stderr is no part of the answer: `ip link` complains
// there ("Peer netns reference is invalid") of every file in /run/netns
// that is no namespace mount, whoever left it.
func nodeLines(t *testing.T, n *cluster.Node, args ...string) []string {
	t.Helper()
	var stderr strings.Builder
	cmd := n.Command(context.Background(), "ip", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.FieldsFunc(string(out), func(r rune) bool { return r == '\n' })
}
