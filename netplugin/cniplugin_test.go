package netplugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/internal/testplugin/record"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

// env is one test's node: a conf dir, a plugin dir with podnet's loopback
// and the test plugin, a cache dir, a network namespace that models the
// node, where the plugins run, and sandboxes that are real network
// namespaces.
type env struct {
	t        *testing.T
	confDir  string
	binDir   string
	cacheDir string
	recDir   string
	hostNS   string

	mu       sync.Mutex
	sandboxs map[string]string // sandbox ID -> netns path
}

func newEnv(t *testing.T) *env {
	t.Helper()
	testutil.RequireRoot(t)
	e := &env{t: t, confDir: filepath.Join(t.TempDir(), "net.d"), binDir: t.TempDir(), cacheDir: t.TempDir(), recDir: t.TempDir(), sandboxs: map[string]string{}}
	testutil.BuildBinary(t, "./plugins/loopback", e.binDir)
	testutil.BuildBinary(t, "./internal/testplugin", e.binDir)
	if err := os.MkdirAll(e.confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	_, e.hostNS = testutil.NewNodeNetNS(t)
	return e
}

// assertRanInNode checks that every recorded plugin run was in the node's
// namespace, not the machine's.
func (e *env) assertRanInNode(recs []record.Record) {
	e.t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(e.hostNS, &st); err != nil {
		e.t.Fatal(err)
	}
	want := "net:[" + strconv.FormatUint(st.Ino, 10) + "]"
	for _, r := range recs {
		if r.NetNS != want {
			e.t.Errorf("%s ran in %s, want the node's %s", r.Command, r.NetNS, want)
		}
	}
}

func (e *env) netnsPath(id string) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p, ok := e.sandboxs[id]; ok {
		return p, nil
	}
	return "", fmt.Errorf("unknown sandbox %q", id)
}

// sandbox creates a real network namespace for a sandbox ID.
func (e *env) sandbox(id string) string {
	e.t.Helper()
	_, path := testutil.NewNetNS(e.t)
	e.mu.Lock()
	e.sandboxs[id] = path
	e.mu.Unlock()
	return path
}

func (e *env) writeConf(name, body string) {
	e.t.Helper()
	if err := os.WriteFile(filepath.Join(e.confDir, name), []byte(body), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// testNet is a network of the test plugin that records into dir.
func testNet(name, recDir string, extra string) string {
	return fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"plugins":[{"type":"testplugin","record":%q,"ip":"10.88.0.5/24"%s}]}`, name, recDir, extra)
}

func (e *env) probe(opts ...ProbeOption) (*CNIPlugin, *Kubenet) {
	e.t.Helper()
	opts = append([]ProbeOption{WithCacheDir(e.cacheDir), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), WithKubenetDataDir(e.t.TempDir()),
		WithRuntimeOptions(cni.WithExec(&cni.RawExec{HostNetNS: e.hostNS}))}, opts...)
	plugins := ProbeNetworkPlugins(e.confDir, []string{e.binDir}, opts...)
	if len(plugins) != 2 || plugins[0].Name() != "cni" || plugins[1].Name() != "kubenet" {
		e.t.Fatalf("probe returned %v", plugins)
	}
	for _, p := range plugins {
		if err := p.Init(InitConfig{Host: HostFunc(e.netnsPath)}); err != nil {
			e.t.Fatal(err)
		}
		e.t.Cleanup(func() { p.Close() })
	}
	return plugins[0].(*CNIPlugin), plugins[1].(*Kubenet)
}

// watchDeadline bounds the wait for what the conf-dir watcher should do
// in milliseconds: generous, for a loaded CI machine.
const watchDeadline = 10 * time.Second

func defaultName(p *CNIPlugin) string {
	def, _ := p.Networks()
	if def == nil {
		return ""
	}
	return def.Name
}

func TestProbeAndHotReload(t *testing.T) {
	e := newEnv(t)
	p, _ := e.probe(WithResyncInterval(time.Hour)) // only notifications, no resync
	if err := p.Status(); err != ErrCNIConfigUninitialized || err.Error() != "cni config uninitialized" {
		t.Fatalf("empty conf dir: Status = %v", err)
	}

	// A broken file alone: still uninitialized, and the file is reported.
	e.writeConf("00-broken.conflist", `{"name":`)
	testutil.Eventually(t, "broken file reported", watchDeadline, func() bool { _, b := p.Networks(); return len(b) == 1 })
	if p.Status() == nil {
		t.Fatal("ready with only a broken file")
	}

	// A valid file appears: ready without a restart.
	e.writeConf("20-b.conflist", testNet("net-b", e.recDir, ""))
	testutil.Eventually(t, "net-b becomes default", watchDeadline, func() bool { return p.Status() == nil && defaultName(p) == "net-b" })

	// A new file that sorts earlier takes over.
	e.writeConf("10-a.conflist", testNet("net-a", e.recDir, ""))
	testutil.Eventually(t, "net-a becomes default", watchDeadline, func() bool { return defaultName(p) == "net-a" })

	// The default network's file is removed: the next one is default.
	if err := os.Remove(filepath.Join(e.confDir, "10-a.conflist")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "net-b default again", watchDeadline, func() bool { return defaultName(p) == "net-b" })

	// The whole directory is deleted: uninitialized; recreated: ready.
	if err := os.RemoveAll(e.confDir); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "uninitialized after rm -r", watchDeadline, func() bool { return p.Status() == ErrCNIConfigUninitialized })
	if err := os.MkdirAll(e.confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	e.writeConf("30-c.conf", `{"cniVersion":"1.0.0","name":"net-c","type":"testplugin"}`)
	testutil.Eventually(t, "net-c after re-creation", watchDeadline, func() bool { return p.Status() == nil && defaultName(p) == "net-c" })
}

func TestResyncCatchesWhatNotificationsMiss(t *testing.T) {
	e := newEnv(t)
	e.writeConf("10-x.conflist", `{"cniVersion":"1.1.0","name":"x"}`) // no plugins yet: broken
	p, _ := e.probe(WithResyncInterval(50 * time.Millisecond))
	if p.Status() == nil {
		t.Fatal("ready without plugins")
	}
	// A plugin file in the network's subdirectory: not watched, found by
	// the periodic resync.
	if err := os.MkdirAll(filepath.Join(e.confDir, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.confDir, "x", "a.conf"), []byte(`{"type":"testplugin"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "resync", watchDeadline, func() bool { return p.Status() == nil })
}

func TestSetUpTearDownRealNamespace(t *testing.T) {
	e := newEnv(t)
	e.writeConf("10-net.conflist", fmt.Sprintf(`{"cniVersion":"1.1.0","name":"net1","plugins":[
		{"type":"testplugin","record":%q,"ip":"10.88.0.5/24"},
		{"type":"testplugin","record":%q,"capabilities":{"portMappings":true}}]}`, e.recDir, e.recDir))
	p, _ := e.probe()
	pm, err := NewPluginManager(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	path := e.sandbox("sb1")
	pod := PodRef{Namespace: "team-a", Name: "web-0", UID: "u-1"}
	st, err := pm.SetUpPod(ctx, pod, "sb1", &PodOptions{PortMappings: []PortMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "TCP"}}})
	if err != nil {
		t.Fatal(err)
	}
	if st.IP != netip.MustParseAddr("10.88.0.5") || st.Network != "net1" || st.Interface != "eth0" {
		t.Errorf("status %+v", st)
	}
	// The loopback network really ran: lo is up in the namespace.
	if err := netns.Do(path, func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		if lo.Attrs().Flags&0x1 == 0 {
			return fmt.Errorf("lo is down")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	recs, err := record.Read(e.recDir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(record.Commands(recs), " "); got != "ADD ADD" {
		t.Fatalf("calls %q", got)
	}
	e.assertRanInNode(recs)
	env := recs[0].Env
	if env["CNI_IFNAME"] != "eth0" || env["CNI_CONTAINERID"] != "sb1" || env["CNI_NETNS"] != path {
		t.Errorf("env %v", env)
	}
	if want := "IgnoreUnknown=1;K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=sb1;K8S_POD_UID=u-1"; env["CNI_ARGS"] != want {
		t.Errorf("CNI_ARGS %q, want %q", env["CNI_ARGS"], want)
	}
	if strings.Contains(recs[0].Stdin, "runtimeConfig") {
		t.Errorf("plugin without capabilities got runtimeConfig: %s", recs[0].Stdin)
	}
	if !strings.Contains(recs[1].Stdin, `"runtimeConfig":{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}`) {
		t.Errorf("portMappings: %s", recs[1].Stdin)
	}

	// Status is checked against the live interface: absent here, because
	// the test plugin only reports an address. Put it there, then it
	// passes.
	if _, err := pm.GetPodNetworkStatus(ctx, pod, "sb1"); err == nil || !strings.Contains(err.Error(), `interface "eth0"`) {
		t.Errorf("status without a live eth0: %v", err)
	}
	addDummy(t, path, "eth0", "10.88.0.5/24")
	st, err = pm.GetPodNetworkStatus(ctx, pod, "sb1")
	if err != nil || st.IP.String() != "10.88.0.5" {
		t.Fatalf("status %+v %v", st, err)
	}
	// A caller that has given up gets its context's error, not a status.
	gaveUp, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := pm.GetPodNetworkStatus(gaveUp, pod, "sb1"); !errors.Is(err, context.Canceled) {
		t.Errorf("status with a cancelled context: %v", err)
	}

	if err := pm.TearDownPod(ctx, pod, "sb1"); err != nil {
		t.Fatal(err)
	}
	recs, _ = record.Read(e.recDir)
	if got := strings.Join(record.Commands(recs), " "); got != "ADD ADD DEL DEL" {
		t.Errorf("calls %q", got)
	}
	assertNoCache(t, e.cacheDir)
	// Tear-down again: idempotent.
	if err := pm.TearDownPod(ctx, pod, "sb1"); err != nil {
		t.Fatal(err)
	}
}

func addDummy(t *testing.T, nsPath, name, cidr string) {
	t.Helper()
	err := netns.Do(nsPath, func() error {
		// A veth pair inside the namespace: this kernel has veth but
		// not necessarily the dummy driver.
		d := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}
		if err := netlink.LinkAdd(d); err != nil {
			return err
		}
		a, err := netlink.ParseAddr(cidr)
		if err != nil {
			return err
		}
		return netlink.AddrAdd(d, a)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func assertNoCache(t *testing.T, dir string) {
	t.Helper()
	entries, _ := os.ReadDir(filepath.Join(dir, "results"))
	for _, e := range entries {
		t.Errorf("cache entry left: %s", e.Name())
	}
}

func TestTearDownAfterNetNSGoneAndConfigChanged(t *testing.T) {
	e := newEnv(t)
	oldRec, newRec := t.TempDir(), t.TempDir()
	e.writeConf("10-net.conflist", testNet("net1", oldRec, ""))
	p, _ := e.probe()
	ctx := context.Background()
	name, _ := testutil.NewNetNS(t)
	e.mu.Lock()
	e.sandboxs["sb1"] = netns.NamedPath(name)
	e.mu.Unlock()
	pod := PodRef{Namespace: "ns", Name: "p"}
	if _, err := p.SetUpPod(ctx, pod, "sb1", nil); err != nil {
		t.Fatal(err)
	}
	// The config changes (another record dir, even another network
	// name), and the namespace disappears.
	e.writeConf("10-net.conflist", testNet("net2", newRec, ""))
	p.Sync()
	if err := netns.DeleteNamed(name); err != nil {
		t.Fatal(err)
	}
	if err := p.TearDownPod(ctx, pod, "sb1"); err != nil {
		t.Fatalf("tear-down after the netns was deleted: %v", err)
	}
	old, _ := record.Read(oldRec)
	if got := strings.Join(record.Commands(old), " "); got != "ADD DEL" {
		t.Errorf("the network used at ADD got %q, want ADD DEL", got)
	}
	if recs, _ := record.Read(newRec); len(recs) != 0 {
		t.Errorf("today's network was called: %v", record.Commands(recs))
	}
	assertNoCache(t, e.cacheDir)
}

func TestSetUpFailureLeavesNothing(t *testing.T) {
	e := newEnv(t)
	e.writeConf("10-net.conflist", testNet("net1", e.recDir, `,"fail":{"ADD":{"code":11,"msg":"try later"}}`))
	p, _ := e.probe()
	e.sandbox("sb1")
	_, err := p.SetUpPod(context.Background(), PodRef{Namespace: "ns", Name: "p"}, "sb1", nil)
	if cni.CodeOf(err) != cni.CodeTryAgainLater {
		t.Fatalf("err %v", err)
	}
	assertNoCache(t, e.cacheDir) // neither the network's nor loopback's
}

// deadWritersTemp puts in the cache the temp file that a runtime killed
// while it cached network's result for sandbox id leaves, as it looks once
// the sweep's age has passed: a file of half an entry that no process
// holds a lock on.
func (e *env) deadWritersTemp(network, id, ifName string) string {
	e.t.Helper()
	dir := filepath.Join(e.cacheDir, "results")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		e.t.Fatal(err)
	}
	path := filepath.Join(dir, "."+network+"-"+id+"-"+ifName+".tmp-2938475")
	if err := os.WriteFile(path, []byte(`{"kind":"cniCacheV1","contai`), 0o600); err != nil {
		e.t.Fatal(err)
	}
	then := time.Now().Add(-time.Hour)
	if err := os.Chtimes(path, then, then); err != nil {
		e.t.Fatal(err)
	}
	return path
}

// A runtime killed while it cached a pod's results leaves their temp
// files and no entry: the pod's tear-down sweeps them.
func TestTearDownSweepsKilledWritersTemps(t *testing.T) {
	e := newEnv(t)
	e.writeConf("10-net.conflist", testNet("net1", e.recDir, ""))
	p, _ := e.probe()
	e.sandbox("sb1")
	e.deadWritersTemp("net1", "sb1", DefaultInterfaceName)
	e.deadWritersTemp(LoopbackNetworkName, "sb1", loopbackIfName)
	if err := p.TearDownPod(context.Background(), PodRef{Namespace: "ns", Name: "p"}, "sb1"); err != nil {
		t.Fatal(err)
	}
	assertNoCache(t, e.cacheDir)
}

func TestGC(t *testing.T) {
	e := newEnv(t)
	e.writeConf("10-net.conflist", testNet("net1", e.recDir, ""))
	p, _ := e.probe()
	ctx := context.Background()
	for _, id := range []string{"keep", "gone1", "gone2"} {
		e.sandbox(id)
		if _, err := p.SetUpPod(ctx, PodRef{Namespace: "ns", Name: id}, id, nil); err != nil {
			t.Fatal(err)
		}
	}
	// A sandbox whose ADD was killed as it cached the result, of a
	// network no entry names any more.
	stray := e.deadWritersTemp("old-net", "gone3", DefaultInterfaceName)
	if err := p.GC(ctx, []string{"keep"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stray); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("GC left a dead writer's temp file: %v", err)
	}
	atts, _ := p.Runtime().CachedAttachments("", "")
	var left []string
	for _, a := range atts {
		left = append(left, a.Network+"/"+a.ContainerID)
	}
	slices.Sort(left)
	if strings.Join(left, " ") != "cni-loopback/keep net1/keep" {
		t.Errorf("after GC: %v", left)
	}
	recs, _ := record.Read(e.recDir)
	var gc []string
	for _, r := range recs {
		switch r.Command {
		case "DEL":
			gc = append(gc, "DEL "+r.Env["CNI_CONTAINERID"])
		case "GC":
			var c struct {
				Valid []cni.GCAttachment `json:"cni.dev/valid-attachments"`
			}
			_ = r.Config(&c)
			gc = append(gc, fmt.Sprintf("GC %v", c.Valid))
		}
	}
	slices.Sort(gc)
	if strings.Join(gc, "; ") != "DEL gone1; DEL gone2; GC [{keep eth0}]" {
		t.Errorf("GC calls %v", gc)
	}
}

func TestConcurrentPods(t *testing.T) {
	e := newEnv(t)
	e.writeConf("10-net.conflist", testNet("net1", e.recDir, ""))
	p, _ := e.probe()
	pm, err := NewPluginManager(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const pods = 50
	for i := 0; i < pods; i++ {
		e.sandbox(fmt.Sprintf("sb%d", i))
	}
	var wg sync.WaitGroup
	errs := make(chan error, pods*4)
	for i := 0; i < pods; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			id := fmt.Sprintf("sb%d", i)
			pod := PodRef{Namespace: "ns", Name: fmt.Sprintf("pod%d", i)}
			if _, err := pm.SetUpPod(ctx, pod, id, nil); err != nil {
				errs <- err
				return
			}
			// Status and tear-down race with each other on one pod;
			// the manager serialises them.
			var inner sync.WaitGroup
			inner.Add(2)
			go func() { defer inner.Done(); _, _ = pm.GetPodNetworkStatus(ctx, pod, id) }()
			go func() {
				defer inner.Done()
				if err := pm.TearDownPod(ctx, pod, id); err != nil {
					errs <- err
				}
			}()
			inner.Wait()
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	assertNoCache(t, e.cacheDir)
	recs, _ := record.Read(e.recDir)
	perSandbox := map[string][]string{}
	for _, r := range recs {
		id := r.Env["CNI_CONTAINERID"]
		perSandbox[id] = append(perSandbox[id], r.Command)
	}
	for id, cmds := range perSandbox {
		if strings.Join(cmds, " ") != "ADD DEL" {
			t.Errorf("%s: %v", id, cmds)
		}
	}
	if len(perSandbox) != pods {
		t.Errorf("%d sandboxes seen, want %d", len(perSandbox), pods)
	}
}

func TestPodCIDREventAndIPRanges(t *testing.T) {
	e := newEnv(t)
	e.writeConf("10-net.conflist", fmt.Sprintf(`{"cniVersion":"1.1.0","name":"net1","plugins":[{"type":"testplugin","record":%q,"capabilities":{"ipRanges":true}}]}`, e.recDir))
	p, _ := e.probe()
	if err := p.Status(); err != ErrNoPodCIDR || err.Error() != "cni config needs ipRanges but no PodCIDR set" {
		t.Fatalf("Status %v", err)
	}
	p.Event(EventPodCIDRChange, map[string]any{PodCIDRKey: "10.244.3.0/24"})
	if err := p.Status(); err != nil {
		t.Fatal(err)
	}
	e.sandbox("sb1")
	if _, err := p.SetUpPod(context.Background(), PodRef{Namespace: "ns", Name: "p"}, "sb1", nil); err != nil {
		t.Fatal(err)
	}
	defer p.TearDownPod(context.Background(), PodRef{Namespace: "ns", Name: "p"}, "sb1")
	recs, _ := record.Read(e.recDir)
	if !strings.Contains(recs[0].Stdin, `"runtimeConfig":{"ipRanges":[[{"subnet":"10.244.3.0/24"}]]}`) {
		t.Errorf("ipRanges not passed: %s", recs[0].Stdin)
	}
}

func TestKubenet(t *testing.T) {
	e := newEnv(t)
	_, k := e.probe()
	if err := k.Status(); err == nil || !strings.Contains(err.Error(), "lack of PodCIDR") {
		t.Fatalf("before the pod CIDR: %v", err)
	}
	k.Event(EventPodCIDRChange, map[string]any{PodCIDRKey: "10.245.1.0/24"})
	err := k.Status()
	if err == nil || !strings.Contains(err.Error(), "required CNI plugin(s) not found") || !strings.Contains(err.Error(), "bridge, host-local") {
		t.Fatalf("without bridge and host-local: %v", err)
	}
	// Stand-ins for the reference plugins, recording what kubenet asks.
	testutil.BuildBinaryAs(t, "./internal/testplugin", e.binDir, "bridge")
	testutil.BuildBinaryAs(t, "./internal/testplugin", e.binDir, "host-local")
	if err := k.Status(); err != nil {
		t.Fatal(err)
	}
	cfg := string(k.network.Plugins[0].Bytes)
	for _, want := range []string{`"bridge":"cbr0"`, `"hairpinMode":true`, `"isDefaultGateway":true`, `"subnet":"10.245.1.0/24"`, `"gateway":"10.245.1.1"`, `"type":"host-local"`} {
		if !strings.Contains(cfg, want) {
			t.Errorf("kubenet config lacks %s: %s", want, cfg)
		}
	}
	e.sandbox("sb1")
	t.Setenv("PODNET_TESTPLUGIN_RECORD", e.recDir)
	pod := PodRef{Namespace: "ns", Name: "p"}
	if _, err := k.SetUpPod(context.Background(), pod, "sb1", nil); err != nil {
		t.Fatal(err)
	}
	if err := k.TearDownPod(context.Background(), pod, "sb1"); err != nil {
		t.Fatal(err)
	}
	recs, _ := record.Read(e.recDir)
	if got := strings.Join(record.Commands(recs), " "); got != "ADD DEL" {
		t.Errorf("kubenet calls %q", got)
	}
	e.assertRanInNode(recs)
	assertNoCache(t, e.cacheDir)
}

// loIsUp reports whether lo is up in the namespace at path.
func loIsUp(t *testing.T, path string) bool {
	t.Helper()
	up := false
	if err := netns.Do(path, func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		up = lo.Attrs().Flags&net.FlagUp != 0
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return up
}

// In process, lo comes up without the loopback plugin (it is not even
// installed here), nothing is cached for it, and tear-down, kubenet's
// readiness and a failed set-up do not miss it.
func TestInProcessLoopback(t *testing.T) {
	e := newEnv(t)
	if err := os.Remove(filepath.Join(e.binDir, "loopback")); err != nil {
		t.Fatal(err)
	}
	e.writeConf("10-net.conflist", testNet("net1", e.recDir, ""))
	p, k := e.probe(WithLoopback(LoopbackInProcess))
	ctx := context.Background()
	path := e.sandbox("sb1")
	pod := PodRef{Namespace: "ns", Name: "p"}
	if _, err := p.SetUpPod(ctx, pod, "sb1", nil); err != nil {
		t.Fatal(err)
	}
	if !loIsUp(t, path) {
		t.Error("lo is down after set-up")
	}
	atts, err := p.Runtime().CachedAttachmentsOf("", "sb1")
	if err != nil || len(atts) != 1 || atts[0].Network != "net1" {
		t.Fatalf("cached attachments %v, %v; want only net1's", atts, err)
	}
	if err := p.TearDownPod(ctx, pod, "sb1"); err != nil {
		t.Fatal(err)
	}
	recs, _ := record.Read(e.recDir)
	if got := strings.Join(record.Commands(recs), " "); got != "ADD DEL" {
		t.Errorf("calls %q", got)
	}
	assertNoCache(t, e.cacheDir)
	// GC looks for no loopback binary either.
	if err := p.GC(ctx, nil); err != nil {
		t.Errorf("GC: %v", err)
	}

	// A namespace that is not one: the loopback half fails, and the
	// default network's attachment is removed again.
	e.mu.Lock()
	e.sandboxs["sb2"] = filepath.Join(t.TempDir(), "not-a-netns")
	e.mu.Unlock()
	if err := os.WriteFile(e.sandboxs["sb2"], nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := p.SetUpPod(ctx, pod, "sb2", nil); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("set-up in a file that is no namespace: %v", err)
	}
	assertNoCache(t, e.cacheDir)

	k.Event(EventPodCIDRChange, map[string]any{PodCIDRKey: "10.245.1.0/24"})
	if err := k.Status(); err == nil || strings.Contains(err.Error(), "loopback") {
		t.Errorf("kubenet in process asks for the loopback plugin: %v", err)
	}
}

func TestParseLoopbackMode(t *testing.T) {
	for _, s := range []string{"plugin", "in-process"} {
		if m, err := ParseLoopbackMode(s); err != nil || string(m) != s {
			t.Errorf("%q: %v %v", s, m, err)
		}
	}
	if _, err := ParseLoopbackMode("internal"); err == nil || !strings.Contains(err.Error(), `"internal"`) {
		t.Errorf("internal: %v", err)
	}
}
