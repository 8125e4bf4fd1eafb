package uibrowser

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/podnet/podnet/flows"
	"github.com/podnet/podnet/flowui"
	"github.com/podnet/podnet/internal/testutil"
)

// The edges' colours: app.css's --forwarded, --dropped-policy and
// --dropped-guard as the browser computes them.
var verdictColour = map[string]string{
	"forwarded":      "rgb(30, 158, 74)",
	"dropped-policy": "rgb(214, 47, 47)",
	"dropped-guard":  "rgb(138, 75, 214)",
}

// shown is what the page shows, read in the page by showJS.
type shown struct {
	Status   string   `json:"status"`
	Rows     int      `json:"rows"`
	Verdicts []string `json:"verdicts"`
	Rules    []string `json:"rules"`
	Sources  []string `json:"sources"`
	Times    []int64  `json:"times"`
	Groups   []string `json:"groups"`
	Nodes    []string `json:"nodes"`
	Edges    []edge   `json:"edges"`
}

type edge struct {
	Src     string `json:"src"`
	Dst     string `json:"dst"`
	Verdict string `json:"verdict"`
	Stroke  string `json:"stroke"`
}

const showJS = `(() => {
  const rows = [...document.querySelectorAll("#flows tbody tr")];
  const all = (sel, f) => [...document.querySelectorAll(sel)].map(f);
  return {
    status: document.querySelector("#status").dataset.state,
    rows: rows.length,
    verdicts: rows.map(r => r.querySelector(".verdict-cell").textContent.trim()),
    rules: rows.map(r => r.querySelector(".rules").textContent.trim()),
    sources: rows.map(r => r.querySelectorAll(".ep")[0].textContent.trim()),
    times: rows.map(r => Number(r.dataset.t)),
    groups: all("#map .group", g => g.dataset.name),
    nodes: all("#map .node", n => n.dataset.id),
    edges: all("#map .edge", e => ({src: e.dataset.src, dst: e.dataset.dst, verdict: e.dataset.verdict,
      stroke: getComputedStyle(e).stroke})),
  };
})()`

func TestUI(t *testing.T) {
	chromium := ensureChromium(t)
	// Two agents, one a node: the page merges their records by time.
	node1 := newTestAgent(t, onNode(knownFlows(), "node-1"))
	agent := newTestAgent(t, onNode(knownFlows(), "node-2")) // the one that streams
	src, err := flowui.NewAgentSource([]string{node1.srv.URL, agent.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	// On 127.0.0.1; closed after the browser ends (cleanups run last
	// first), or Close would wait for the page's follow stream.
	ui := httptest.NewServer(flowui.New(src, "2 agents"))
	t.Cleanup(ui.Close)
	ctx := browser(t, chromium)

	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800), chromedp.Navigate(ui.URL+"/")); err != nil {
		t.Fatalf("loading %s: %v", ui.URL, err)
	}
	got := waitShown(t, ctx, "the known flows, live", `document.querySelectorAll("#flows tbody tr").length === 9 &&
		document.querySelectorAll("#map .edge").length === 8 && document.querySelector("#status").dataset.state === "live"`)
	checkTable(t, got)
	checkMap(t, got, map[string]int{"forwarded": 4, "dropped-policy": 2, "dropped-guard": 2})
	for _, g := range []string{"billing", "shop", "outside"} {
		if !contains(got.Groups, g) {
			t.Errorf("map groups %v: no %q", got.Groups, g)
		}
	}
	for _, n := range []string{"shop/web-1", "billing/ledger-0", "203.0.113.10", "10.244.9.99"} {
		if !contains(got.Nodes, n) {
			t.Errorf("map nodes %v: no %q", got.Nodes, n)
		}
	}

	// A record the agent streams after the page loaded shows without a
	// reload: a row on top, a new pod and its edge on the map.
	agent.waitFollower(t, "")
	if n := agent.push(liveFlow()); n != 1 {
		t.Fatalf("the live record went to %d followers, want the page's one", n)
	}
	got = waitShown(t, ctx, "the streamed record", `document.querySelectorAll("#flows tbody tr").length === 10 &&
		document.querySelector('#map .edge[data-src="shop/web-3"]') !== null`)
	if !strings.HasPrefix(got.Sources[0], "shop/web-3") || got.Verdicts[0] != "forwarded" {
		t.Errorf("top row: source %q verdict %q, want the streamed shop/web-3, forwarded", got.Sources[0], got.Verdicts[0])
	}
	checkMap(t, got, map[string]int{"forwarded": 5, "dropped-policy": 2, "dropped-guard": 2})
	time.Sleep(1500 * time.Millisecond) // the new row's highlight fades
	screenshot(t, ctx)

	// A filter: the page asks the agents for dropped-policy only.
	if err := chromedp.Do(ctx, chromedp.SetValue(`select[name=verdict]`, "dropped-policy"), chromedp.Click(`#apply`)); err != nil {
		t.Fatal(err)
	}
	got = waitShown(t, ctx, "the dropped-policy filter", `document.querySelectorAll("#flows tbody tr").length === 2 &&
		document.querySelectorAll("#map .edge").length === 2 &&
		document.querySelector("#status").dataset.state === "live" && location.search === "?verdict=dropped-policy"`)
	for _, v := range got.Verdicts {
		if v != "dropped-policy" {
			t.Errorf("filtered by verdict=dropped-policy, a row shows %q", v)
		}
	}
	checkMap(t, got, map[string]int{"dropped-policy": 2})
	if !agent.asked("verdict", "dropped-policy") || !node1.asked("verdict", "dropped-policy") {
		t.Error("the agents were not asked with verdict=dropped-policy")
	}

	// The filtered page follows too: a drop streamed now is its third row.
	drop := liveFlow()
	drop.Verdict, drop.Rules, drop.Seq = flows.DroppedPolicy, []flows.Rule{isolateLedg}, 101
	drop.Dst = port(ledger, 9000)
	agent.waitFollower(t, "dropped-policy")
	if n := agent.push(drop); n != 1 {
		t.Fatalf("the streamed drop went to %d followers, want the page's one", n)
	}
	got = waitShown(t, ctx, "the streamed drop", `document.querySelectorAll("#flows tbody tr").length === 3 &&
		document.querySelectorAll("#map .edge").length === 3`)
	checkMap(t, got, map[string]int{"dropped-policy": 3})
}

// waitShown waits until the page satisfies cond, then reads what it
// shows.
func waitShown(t *testing.T, ctx context.Context, what, cond string) shown {
	t.Helper()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second)))
	got, rerr := chromedp.Run(ctx, chromedp.Evaluate[shown](showJS))
	if rerr != nil {
		t.Fatalf("reading the page: %v", rerr)
	}
	if err != nil {
		t.Fatalf("waiting for %s: %v; the page shows %+v", what, err, got)
	}
	return got
}

func checkTable(t *testing.T, got shown) {
	t.Helper()
	count := map[string]int{}
	for _, v := range got.Verdicts {
		count[v]++
	}
	if fmt.Sprint(count) != "map[dropped-guard:2 dropped-policy:2 forwarded:5]" {
		t.Errorf("table verdicts %v, want 5 forwarded, 2 dropped-policy, 2 dropped-guard", count)
	}
	for i := 1; i < len(got.Times); i++ {
		if got.Times[i] > got.Times[i-1] {
			t.Errorf("row %d is newer than row %d: the two agents' records are not merged by time (%v)", i, i-1, got.Times)
		}
	}
	// Newest first: the ICMP guard drop, then web-2 to db-0 with both
	// sides' rules.
	if got.Verdicts[0] != "dropped-guard" || got.Rules[0] != "no policy" {
		t.Errorf("top row: verdict %q rules %q, want dropped-guard, no policy", got.Verdicts[0], got.Rules[0])
	}
	wantRules := "NetworkPolicy shop/web · egress[0] · Allow" + "NetworkPolicy shop/db · ingress[0] · Allow"
	if got.Rules[1] != wantRules {
		t.Errorf("second row's rules %q, want %q", got.Rules[1], wantRules)
	}
	if !contains(got.Rules, "Admin ClusterNetworkPolicy shop-db-lockdown · ingress[1] · Deny") {
		t.Errorf("no row shows the Admin tier's rule: %q", got.Rules)
	}
}

func checkMap(t *testing.T, got shown, want map[string]int) {
	t.Helper()
	count := map[string]int{}
	for _, e := range got.Edges {
		count[e.Verdict]++
		if c := verdictColour[e.Verdict]; e.Stroke != c {
			t.Errorf("edge %s -> %s (%s) drawn in %s, want %s", e.Src, e.Dst, e.Verdict, e.Stroke, c)
		}
	}
	if fmt.Sprint(count) != fmt.Sprint(want) {
		t.Errorf("map edges by verdict %v, want %v (edges %+v)", count, want, got.Edges)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// screenshot writes the full page to the test's temp dir, and to
// docs/podnet-ui.png when PODNET_UI_SCREENSHOT=1.
func screenshot(t *testing.T, ctx context.Context) {
	t.Helper()
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	img, err := png.DecodeConfig(bytes.NewReader(buf))
	if err != nil || img.Width != 1280 || img.Height != 800 {
		t.Errorf("screenshot: %dx%d %v, want a 1280x800 PNG", img.Width, img.Height, err)
	}
	path := filepath.Join(t.TempDir(), "podnet-ui.png")
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(buf))
	if os.Getenv("PODNET_UI_SCREENSHOT") != "1" {
		return
	}
	docs, err := filepath.Abs(filepath.Join("..", "..", "..", "docs", "podnet-ui.png"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(docs, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot copied to %s", docs)
}

// browser starts headless chromium for the test, with no network but
// loopback: every other address goes to a proxy that is not there
// (port 9, discard), and no name resolves.
func browser(t *testing.T, chromium string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("proxy-server", "http://127.0.0.1:9"),
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"),
		chromedp.Flag("hide-scrollbars", true),
	)
	if os.Geteuid() == 0 {
		// Chromium's sandbox refuses to run as root.
		opts = append(opts, chromedp.NoSandbox)
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	return ctx
}

// ensureChromium returns chromium's path, installing Debian's package
// with apt-get when it is missing (root; with CI set, not being root
// fails the test).
func ensureChromium(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	testutil.RequireRoot(t)
	t.Log("installing chromium with apt-get")
	for _, args := range [][]string{{"update", "-qq"}, {"install", "-y", "-qq", "chromium"}} {
		// Another test may hold dpkg's lock (the cluster tests install
		// containerd's dependencies): wait for it rather than fail.
		cmd := exec.Command("apt-get", append([]string{"-o", "DPkg::Lock::Timeout=600"}, args...)...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("apt-get %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	p, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium installed, but: %v", err)
	}
	return p
}
