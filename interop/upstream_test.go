package interop

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/podnet/podnet/cni"
)

// versions are the specification versions every scenario runs at.
var versions = []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// tuningMAC is the MAC the tuning plugin gives the pod interface; unlike
// random MACs it must come out equal.
const tuningMAC = "c2:99:00:00:00:02"

// scenario is a chain of upstream plugins. conf is the conflist with
// %NAME%, %VERSION% and %DIR% (a directory of the side that runs it) to
// fill in.
type scenario struct {
	name    string
	conf    string
	capArgs map[string]any
}

var scenarios = []scenario{
	{
		// Routed veth, dual stack, with every meta plugin after it.
		name: "ptp-tuning-portmap-bandwidth",
		conf: `{
  "cniVersion": "%VERSION%", "name": "%NAME%",
  "plugins": [
    {"type": "ptp", "ipMasq": true, "mtu": 1400,
     "ipam": {"type": "host-local", "dataDir": "%DIR%/ipam",
              "ranges": [[{"subnet": "10.99.1.0/24"}], [{"subnet": "fd00:99:1::/64"}]],
              "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]},
     "dns": {"nameservers": ["10.99.1.53"], "search": ["pnio.test"]}},
    {"type": "tuning", "dataDir": "%DIR%/tuning", "mac": "` + tuningMAC + `", "mtu": 1300,
     "promisc": true, "sysctl": {"net.ipv4.conf.IFNAME.arp_notify": "1"}},
    {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true},
    {"type": "bandwidth", "capabilities": {"bandwidth": true}}
  ]
}`,
		capArgs: map[string]any{
			"portMappings": []any{
				map[string]any{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"},
				map[string]any{"hostPort": 18053, "containerPort": 53, "protocol": "udp"},
			},
			"bandwidth": map[string]any{"ingressRate": 8000000, "ingressBurst": 80000, "egressRate": 4000000, "egressBurst": 40000},
		},
	},
	{
		// Bridge with the gateway on it, portmap on the nftables backend.
		name: "bridge-portmap-nftables",
		conf: `{
  "cniVersion": "%VERSION%", "name": "%NAME%",
  "plugins": [
    {"type": "bridge", "bridge": "pnio-br0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "%DIR%/ipam",
              "ranges": [[{"subnet": "10.99.2.0/24", "gateway": "10.99.2.1"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "backend": "nftables", "capabilities": {"portMappings": true}}
  ]
}`,
		capArgs: map[string]any{
			"portMappings": []any{map[string]any{"hostPort": 18443, "containerPort": 443, "protocol": "tcp"}},
		},
	},
	{
		name: "loopback",
		conf: `{"cniVersion": "%VERSION%", "name": "%NAME%", "plugins": [{"type": "loopback"}]}`,
	},
}

// side is one runtime's world in a comparison: its own node and pod
// namespaces and its own directories, so both runtimes get identical
// allocations (the first address of the pool) without meeting.
type side struct {
	r         runner
	node, pod netNS
	dir       string // plugin state (host-local, tuning)
	cache     string
	conf      []byte
}

func (s *side) cachePath(network string, a attachment) string {
	return filepath.Join(s.cache, "results", network+"-"+a.ContainerID+"-"+a.IfName)
}

// TestUpstreamPlugins runs each scenario at each version through podnet's
// runtime and through libcni, and checks that they agree on everything:
// the ADD result, the cached entry, the state of the node and the pod
// after ADD and after DEL, CHECK and STATUS. After DEL nothing of the
// attachment may remain.
func TestUpstreamPlugins(t *testing.T) {
	requireRoot(t)
	path := []string{upstreamBinDir(t)}
	for _, sc := range scenarios {
		for _, v := range versions {
			t.Run(sc.name+"/"+v, func(t *testing.T) {
				t.Parallel()
				compareScenario(t, path, sc, v)
			})
		}
	}
}

func newSide(t *testing.T, mk newRunner, path []string) *side {
	s := &side{node: newNetNS(t), pod: newNetNS(t), dir: t.TempDir(), cache: t.TempDir()}
	s.r = mk(path, s.cache, &s.node)
	return s
}

func compareScenario(t *testing.T, path []string, sc scenario, version string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	network := uniqueName(t, "pnio-net-")
	a := attachment{ContainerID: uniqueName(t, "pnio-ctr-"), IfName: "eth0", CapArgs: sc.capArgs,
		Args: [][2]string{{"IgnoreUnknown", "true"}, {"K8S_POD_NAME", "pod-1"}}}
	p, l := newSide(t, bothLibraries[0], path), newSide(t, bothLibraries[1], path)
	sides := []*side{p, l}
	for _, s := range sides {
		s.conf = []byte(strings.NewReplacer("%VERSION%", version, "%NAME%", network, "%DIR%", s.dir).Replace(sc.conf))
	}
	// One normalizer per side: its own paths become placeholders.
	norm := func(s *side) *normalizer {
		return newNormalizer([]string{tuningMAC, "00:00:00:00:00:00"},
			s.pod.Path, "PODNS", s.node.Path, "NODENS", s.dir, "DIR", s.cache, "CACHE")
	}
	attach := func(s *side) attachment { c := a; c.NetNS = s.pod.Path; return c }
	snap := func(phase string) {
		t.Helper()
		for _, which := range []string{"node", "pod"} {
			var got [2][]string
			for i, s := range sides {
				n := s.node
				if which == "pod" {
					n = s.pod
				}
				got[i] = snapshot(t, n, norm(s))
			}
			if d := diffLines("podnet", got[0], "libcni", got[1]); d != "" {
				t.Errorf("%s: %s namespace differs between podnet and libcni:\n%s", phase, which, d)
			}
			if testing.Verbose() {
				t.Logf("%s: %s namespace:\n  %s", phase, which, strings.Join(got[0], "\n  "))
			}
		}
	}

	// ADD: results equal.
	var res [2]string
	for i, s := range sides {
		out, err := s.r.add(ctx, s.conf, attach(s))
		if err != nil {
			t.Fatalf("%v ADD: %v", s.r, err)
		}
		if s.r.String() == "podnet" {
			checkIPVersions(t, "podnet runtime", out)
		}
		res[i] = norm(s).json(t, out)
	}
	if d := diffText("podnet", res[0], "libcni", res[1]); d != "" {
		t.Errorf("ADD results differ:\n%s", d)
	}
	t.Logf("ADD result (normalized):\n%s", res[0])
	if strings.Contains(sc.conf, tuningMAC) && !strings.Contains(res[0], tuningMAC) {
		t.Errorf("podnet's result lacks the MAC tuning set:\n%s", res[0])
	}
	snap("after ADD")

	// The cache entries are equal, and each library reads both.
	var entries [2]string
	for i, s := range sides {
		entries[i] = cacheEntry(t, s.cachePath(network, a), norm(s))
	}
	if d := diffText("podnet", entries[0], "libcni", entries[1]); d != "" {
		t.Errorf("cache entries differ:\n%s", d)
	}
	for _, s := range sides {
		for _, reader := range []runner{newPodnetRunner(path, s.cache, nil), newLibcniRunner(path, s.cache, nil)} {
			got, err := reader.cachedResult(s.conf, attach(s))
			if err != nil || got == nil {
				t.Errorf("%v reading the cache %v wrote: %s, %v", reader, s.r, got, err)
				continue
			}
			if d := diffText("cached", norm(s).json(t, got), "returned", res[0]); d != "" {
				t.Errorf("%v reading the cache %v wrote: differs from the ADD result:\n%s", reader, s.r, d)
			}
		}
	}

	// CHECK: both succeed from 0.4.0 on, both refuse before.
	for _, s := range sides {
		err := s.r.check(ctx, s.conf, attach(s))
		if cni.AtLeast(version, "0.4.0") && err != nil {
			t.Errorf("%v CHECK: %v", s.r, err)
		}
		if !cni.AtLeast(version, "0.4.0") && err == nil {
			t.Errorf("%v CHECK at %s succeeded; CHECK does not exist before 0.4.0", s.r, version)
		}
	}
	// STATUS: both succeed (a no-op before 1.1.0).
	for _, s := range sides {
		if err := s.r.status(ctx, s.conf); err != nil {
			t.Errorf("%v STATUS: %v", s.r, err)
		}
	}

	// DEL, twice: the second must succeed too, with nothing left to do.
	for _, s := range sides {
		for i := range 2 {
			if err := s.r.del(ctx, s.conf, attach(s)); err != nil {
				t.Errorf("%v DEL #%d: %v", s.r, i+1, err)
			}
		}
	}
	snap("after DEL")
	for _, s := range sides {
		assertGone(t, s, network, a)
	}
}

// cacheEntry reads a cache file and returns it normalized, with the
// embedded configuration decoded so that it compares as JSON.
func cacheEntry(t *testing.T, path string, norm *normalizer) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("cache entry: %v", err)
		return ""
	}
	var e map[string]any
	if err := json.Unmarshal(b, &e); err != nil {
		t.Errorf("cache entry %s: %v", path, err)
		return ""
	}
	if c, ok := e["config"].(string); ok {
		var raw []byte
		if err := json.Unmarshal([]byte(`"`+c+`"`), &raw); err == nil {
			var conf any
			if json.Unmarshal(raw, &conf) == nil {
				e["config"] = conf
			}
		}
	}
	return norm.json(t, mustJSON(e))
}

var ipFile = regexp.MustCompile(`^ipam/[^/]+/[0-9a-f.:]+$`)

// assertGone checks that nothing of the attachment outlived DEL: no cache
// entry, no address held by host-local, no tuning backup, no link in the
// pod but lo, no host veth, and no rule naming the container.
func assertGone(t *testing.T, s *side, network string, a attachment) {
	t.Helper()
	if _, err := os.Stat(s.cachePath(network, a)); !os.IsNotExist(err) {
		t.Errorf("%v: cache entry survives DEL (%v)", s.r, err)
	}
	for _, f := range filesIn(t, s.dir) {
		if ipFile.MatchString(f) || strings.HasPrefix(f, "tuning/") {
			t.Errorf("%v: plugin state survives DEL: %s", s.r, f)
		}
	}
	for _, l := range snapshot(t, s.pod, newNormalizer(nil)) {
		if strings.HasPrefix(l, "link ") && !strings.HasPrefix(l, "link lo ") {
			t.Errorf("%v: pod namespace keeps %s", s.r, l)
		}
	}
	for _, l := range snapshot(t, s.node, newNormalizer(nil)) {
		if strings.Contains(l, "link VETH") || strings.Contains(l, "link bwp") || strings.Contains(l, a.ContainerID) {
			t.Errorf("%v: node namespace keeps %s", s.r, l)
		}
	}
}
