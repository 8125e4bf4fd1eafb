package interop

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/podnet/podnet/cni"
)

// recorded is one call the noop plugin recorded.
type recorded struct {
	Command string            `json:"command"`
	Env     map[string]string `json:"env"`
	Stdin   json.RawMessage   `json:"stdin"`
}

// readRecord returns the calls recorded in path, in order.
func readRecord(t testing.TB, path string) []recorded {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []recorded
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r recorded
		decode(t, sc.Text(), &r)
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// prevResultOf returns the prevResult a recorded call got, or nil.
func prevResultOf(t testing.TB, r recorded) []byte {
	t.Helper()
	var c struct {
		PrevResult json.RawMessage `json:"prevResult"`
	}
	decode(t, string(r.Stdin), &c)
	if len(c.PrevResult) == 0 || string(c.PrevResult) == "null" {
		return nil
	}
	return c.PrevResult
}

// cacheConf is a routed veth with host-local, and a recorder after it
// that shows what the runtime passed to the chain on every verb.
const cacheConf = `{
  "cniVersion": "%VERSION%", "name": "%NAME%",
  "plugins": [
    {"type": "ptp",
     "ipam": {"type": "host-local", "dataDir": "%DIR%/ipam", "ranges": [[{"subnet": "10.99.3.0/24"}]]}},
    {"type": "noop", "record": "%DIR%/record.jsonl"}
  ]
}`

// TestSharedCache adds an attachment with one library and removes it
// with the other, both ways, through one cache directory: the second
// library finds the cached result (it reads it back, CHECK passes, DEL
// hands it to the plugins as prevResult) and its DEL frees everything,
// the cache entry included.
func TestSharedCache(t *testing.T) {
	requireRoot(t)
	path := []string{upstreamBinDir(t), noopBinDir(t)}
	podnet, libcni := bothLibraries[0], bothLibraries[1]
	for _, dir := range [][2]newRunner{{libcni, podnet}, {podnet, libcni}} {
		for _, v := range versions {
			name := libraryName(dir[0]) + "-adds-" + libraryName(dir[1]) + "-deletes/" + v
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				node, pod := newNetNS(t), newNetNS(t)
				stateDir, cacheDir := t.TempDir(), t.TempDir()
				network := uniqueName(t, "pnio-net-")
				conf := []byte(strings.NewReplacer("%VERSION%", v, "%NAME%", network, "%DIR%", stateDir).Replace(cacheConf))
				a := attachment{ContainerID: uniqueName(t, "pnio-ctr-"), NetNS: pod.Path, IfName: "eth0"}
				adder, deleter := dir[0](path, cacheDir, &node), dir[1](path, cacheDir, &node)
				norm := newNormalizer(nil, pod.Path, "PODNS")
				record := filepath.Join(stateDir, "record.jsonl")

				out, err := adder.add(ctx, conf, a)
				if err != nil {
					t.Fatalf("%v ADD: %v", adder, err)
				}
				added := norm.json(t, out)
				entry := filepath.Join(cacheDir, "results", network+"-"+a.ContainerID+"-"+a.IfName)
				if _, err := os.Stat(entry); err != nil {
					t.Fatalf("%v wrote no cache entry: %v", adder, err)
				}
				got, err := deleter.cachedResult(conf, a)
				if err != nil || got == nil {
					t.Fatalf("%v reading the cached result %v wrote: %s, %v", deleter, adder, got, err)
				}
				if d := diffText("cached", norm.json(t, got), "added", added); d != "" {
					t.Errorf("%v reads a different result than %v cached:\n%s", deleter, adder, d)
				}
				if cni.AtLeast(v, "0.4.0") {
					if err := deleter.check(ctx, conf, a); err != nil {
						t.Errorf("%v CHECK of what %v added: %v", deleter, adder, err)
					}
				}
				ipFiles := func() []string {
					var ips []string
					for _, f := range filesIn(t, stateDir) {
						if ipFile.MatchString(f) {
							ips = append(ips, f)
						}
					}
					return ips
				}
				if len(ipFiles()) != 1 {
					t.Fatalf("host-local holds %v after ADD, want one address", ipFiles())
				}

				if err := deleter.del(ctx, conf, a); err != nil {
					t.Fatalf("%v DEL of what %v added: %v", deleter, adder, err)
				}
				if _, err := os.Stat(entry); !os.IsNotExist(err) {
					t.Errorf("cache entry survives %v's DEL (%v)", deleter, err)
				}
				if ips := ipFiles(); len(ips) != 0 {
					t.Errorf("host-local still holds %v after %v's DEL", ips, deleter)
				}
				for _, l := range snapshot(t, node, newNormalizer(nil)) {
					if strings.HasPrefix(l, "link VETH") {
						t.Errorf("node namespace keeps %s after %v's DEL", l, deleter)
					}
				}

				// What the plugins got: DEL (and CHECK) came with the
				// cached result from 0.4.0 on, and without one before.
				calls := readRecord(t, record)
				var verbs []string
				for _, c := range calls {
					verbs = append(verbs, c.Command)
					if c.Env["CNI_CONTAINERID"] != a.ContainerID || c.Env["CNI_IFNAME"] != a.IfName {
						t.Errorf("%s got CNI_CONTAINERID=%q CNI_IFNAME=%q", c.Command, c.Env["CNI_CONTAINERID"], c.Env["CNI_IFNAME"])
					}
					if c.Command == "ADD" {
						continue
					}
					prev := prevResultOf(t, c)
					switch {
					case !cni.AtLeast(v, "0.4.0") && prev != nil:
						t.Errorf("%s at %s got a prevResult: %s", c.Command, v, prev)
					case cni.AtLeast(v, "0.4.0") && prev == nil:
						t.Errorf("%s by %v got no prevResult: the cache %v wrote was not used", c.Command, deleter, adder)
					case prev != nil:
						if d := diffText("prevResult", norm.json(t, prev), "added", added); d != "" {
							t.Errorf("%s by %v: prevResult differs from the ADD result:\n%s", c.Command, deleter, d)
						}
					}
				}
				want := []string{"ADD", "DEL"}
				if cni.AtLeast(v, "0.4.0") {
					want = []string{"ADD", "CHECK", "DEL"}
				}
				if !slices.Equal(verbs, want) {
					t.Errorf("the recorder saw %v, want %v", verbs, want)
				}
			})
		}
	}
}

// TestGC garbage-collects with each library in the same situation and
// checks they leave the same state: of three attachments, A is valid, B
// is stale with a cache entry (GC must DEL it), C is stale without one
// (only plugin GC could free it; host-local does not implement GC).
// The recorder shows what each library sent the plugins.
func TestGC(t *testing.T) {
	requireRoot(t)
	path := []string{upstreamBinDir(t), noopBinDir(t)}
	for _, v := range []string{"1.0.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			network := uniqueName(t, "pnio-net-")
			ids := []string{uniqueName(t, "pnio-a-"), uniqueName(t, "pnio-b-"), uniqueName(t, "pnio-c-")}
			type world struct {
				r                    runner
				node                 netNS
				pods                 []netNS
				stateDir, cache      string
				conf                 []byte
				cacheAfter, ipsAfter []string
				gcCalls              []string
			}
			var worlds []*world
			for _, mk := range bothLibraries {
				w := &world{node: newNetNS(t), stateDir: t.TempDir(), cache: t.TempDir()}
				w.r = mk(path, w.cache, &w.node)
				w.conf = []byte(strings.NewReplacer("%VERSION%", v, "%NAME%", network, "%DIR%", w.stateDir).Replace(cacheConf))
				worlds = append(worlds, w)
			}
			att := func(w *world, i int) attachment {
				return attachment{ContainerID: ids[i], NetNS: w.pods[i].Path, IfName: "eth0"}
			}
			for _, w := range worlds {
				for i := range ids {
					w.pods = append(w.pods, newNetNS(t))
					if _, err := w.r.add(ctx, w.conf, att(w, i)); err != nil {
						t.Fatalf("%v ADD %s: %v", w.r, ids[i], err)
					}
				}
				lost := filepath.Join(w.cache, "results", network+"-"+ids[2]+"-eth0")
				if err := os.Remove(lost); err != nil {
					t.Fatal(err)
				}
				if err := os.Remove(filepath.Join(w.stateDir, "record.jsonl")); err != nil {
					t.Fatal(err)
				}
				if err := w.r.gc(ctx, w.conf, []attachment{att(w, 0)}); err != nil {
					t.Errorf("%v GC: %v", w.r, err)
				}
				w.cacheAfter = filesIn(t, w.cache)
				w.ipsAfter = filesIn(t, filepath.Join(w.stateDir, "ipam"))
				for _, c := range readRecord(t, filepath.Join(w.stateDir, "record.jsonl")) {
					line := c.Command + " " + c.Env["CNI_CONTAINERID"]
					if c.Command == "GC" {
						var gc map[string]any
						decode(t, string(c.Stdin), &gc)
						delete(gc, "record")
						line += " " + string(mustJSON(gc))
					}
					w.gcCalls = append(w.gcCalls, line)
				}
			}
			p, l := worlds[0], worlds[1]
			if d := diffLines("podnet", p.cacheAfter, "libcni", l.cacheAfter); d != "" {
				t.Errorf("cache after GC differs:\n%s", d)
			}
			if want := []string{"results/" + network + "-" + ids[0] + "-eth0"}; !slices.Equal(p.cacheAfter, want) {
				t.Errorf("podnet: cache after GC holds %v, want %v", p.cacheAfter, want)
			}
			if d := diffLines("podnet", p.ipsAfter, "libcni", l.ipsAfter); d != "" {
				t.Errorf("host-local state after GC differs:\n%s", d)
			}
			if d := diffLines("podnet", p.gcCalls, "libcni", l.gcCalls); d != "" {
				t.Errorf("plugin calls during GC differ:\n%s", d)
			}
			var nodes [2][]string
			for i, w := range worlds {
				nodes[i] = snapshot(t, w.node, newNormalizer(nil, w.stateDir, "DIR"))
			}
			if d := diffLines("podnet", nodes[0], "libcni", nodes[1]); d != "" {
				t.Errorf("node namespace after GC differs:\n%s", d)
			}
		})
	}
}

// TestGCSweepsTempLibcniReads: podnet killed between writing a result's
// temp file and renaming it into place leaves a complete entry under a
// dot name. libcni reads every file of results/ and lists it as an
// attachment that ADD never reported, so its GC would DEL that on every
// pass. Once the file has gone unwritten long enough to be a dead
// writer's, podnet's GC, of any network, sweeps it, and libcni lists
// nothing.
func TestGCSweepsTempLibcniReads(t *testing.T) {
	cacheDir := t.TempDir()
	results := filepath.Join(cacheDir, "results")
	if err := os.MkdirAll(results, 0o700); err != nil {
		t.Fatal(err)
	}
	stray := filepath.Join(results, ".pnio-net-pnio-ctr-eth0.tmp-4242")
	entry := `{"kind":"cniCacheV1","containerId":"pnio-ctr","ifName":"eth0","networkName":"pnio-net","result":{"cniVersion":"1.0.0"}}`
	if err := os.WriteFile(stray, []byte(entry), 0o600); err != nil {
		t.Fatal(err)
	}
	then := time.Now().Add(-time.Hour)
	if err := os.Chtimes(stray, then, then); err != nil {
		t.Fatal(err)
	}
	lib := libcni.NewCNIConfigWithCacheDir(nil, cacheDir, nil)
	if atts, err := lib.GetCachedAttachments(""); err != nil || len(atts) != 1 || atts[0].ContainerID != "pnio-ctr" {
		t.Fatalf("libcni lists %v (%v); want the temp file taken for an attachment", atts, err)
	}
	list, err := cni.ParseNetworkConfigList([]byte(`{"cniVersion":"1.0.0","name":"pnio-other","plugins":[{"type":"noop"}]}`), "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := cni.NewRuntime(nil, cni.WithCacheDir(cacheDir)).GCNetworkList(context.Background(), list, nil); err != nil {
		t.Fatal(err)
	}
	if atts, err := lib.GetCachedAttachments(""); err != nil || len(atts) != 0 {
		t.Errorf("libcni lists %v (%v) after podnet's GC, want none", atts, err)
	}
}
