package nodeclean

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestClassifyConfig(t *testing.T) {
	for _, tt := range []struct {
		name, data string
		podnet, ok bool
	}{
		{"10-podnet.conflist", `{"name":"podnet","plugins":[{"type":"podnet","ipam":{"type":"podnet-ipam"}}]}`, true, true},
		// Any name: the agent installs --network-config under its own name.
		{"05-mine.conflist", `{"name":"x","plugins":[{"type":"tuning"},{"type":"podnet"},{"type":"podnet-portmap"}]}`, true, true},
		{"99-single.conf", `{"name":"x","type":"podnet"}`, true, true},
		{"10-calico.conflist", `{"name":"k8s-pod-network","plugins":[{"type":"calico"},{"type":"portmap"}]}`, false, true},
		// Another main plugin with podnet's IPAM is the user's config.
		{"20-bridge.conflist", `{"name":"b","plugins":[{"type":"bridge","ipam":{"type":"podnet-ipam"}},{"type":"podnet-portmap"}]}`, false, true},
		{"10-podnet.conflist", `{broken`, true, true},
		{"10-other.conflist", `{broken`, false, true},
		{".10-podnet.conflist.tmp-123", `{"plugins":[`, true, true},
		{".10-calico.conflist.tmp-123", `{}`, false, false},
		{"README", `{"type":"podnet"}`, false, false},
	} {
		f, ok := classifyConfig(tt.name, []byte(tt.data))
		if f.Podnet != tt.podnet || ok != tt.ok {
			t.Errorf("%s %s: podnet %v listed %v, want %v %v", tt.name, tt.data, f.Podnet, ok, tt.podnet, tt.ok)
		}
		if ok && !f.Podnet && f.Reason == "" {
			t.Errorf("%s: kept without a reason", tt.name)
		}
	}
}

func TestClassifyPlugin(t *testing.T) {
	for _, tt := range []struct {
		name, build string
		podnet, ok  bool
	}{
		{"podnet", "", true, true},
		{"podnet-ipam", "", true, true},
		{"podnet-portmap", "github.com/podnet/podnet/plugins/podnet-portmap", true, true},
		{".podnet-ipam.tmp-42", "", true, true},
		{"loopback", "github.com/podnet/podnet/plugins/loopback", true, true},
		{"loopback", "github.com/containernetworking/plugins/plugins/main/loopback", false, true},
		{"loopback", "", false, true}, // not Go, or no build information
		{"bridge", "github.com/containernetworking/plugins/plugins/main/bridge", false, false},
		{"calico", "", false, false},
	} {
		f, ok := classifyPlugin(tt.name, tt.build)
		if f.Podnet != tt.podnet || ok != tt.ok {
			t.Errorf("%s (%q): podnet %v listed %v, want %v %v", tt.name, tt.build, f.Podnet, ok, tt.podnet, tt.ok)
		}
	}
}

// The plan removes in order (config first, the record last), only
// podnet's, and restores only the sysctls that still hold podnet's value.
func TestPlan(t *testing.T) {
	f := Found{
		Configs: []File{{Path: "/c/10-podnet.conflist", Podnet: true}, {Path: "/c/10-calico.conflist", Reason: "theirs"}},
		Plugins: []File{{Path: "/b/podnet", Podnet: true}, {Path: "/b/loopback", Reason: "upstream's"}},
		Links:   []string{"podnet.vxlan", "podnet.wg"},
		Routes:  []Route{{Dst: netip.MustParsePrefix("10.244.1.0/24"), Desc: "10.244.1.0/24 via 198.18.0.2 proto 97"}},
		Tables: []Table{{"inet", "podnet"}, {"inet", "other"}, {"ip", "podnet"}, {"bridge", "podnet-guard"},
			{"inet", "podnet-policy"}, {"inet", "podnet-closed"}, {"inet", "podnet-portmap"}},
		StateEntries: []string{"/s/ipam.db", "/s/wireguard.key"},
		RunEntries:   []string{"/r/policy.sock"},
		Sysctls: []Sysctl{
			{Key: "net/ipv4/ip_forward", Original: "0", Set: "1", Current: "1", Exists: true},
			{Key: "net/ipv6/conf/all/forwarding", Original: "0", Set: "1", Current: "0", Exists: true},
			{Key: "net/ipv4/conf/podnet.vxlan/forwarding", Original: "0", Set: "1"},
			{Key: "net/ipv4/conf/all/rp_filter", Original: "1", Set: "0", Current: "2", Exists: true},
		},
		Record:          "/s/sysctls.json",
		WireGuardSocket: &Socket{Path: "/w/podnet.wg.sock"},
	}
	steps, kept := Plan(f)
	var got []string
	for _, s := range steps {
		got = append(got, string(s.Kind)+" "+s.Target)
	}
	want := []string{
		"config /c/10-podnet.conflist", "plugin /b/podnet", "link podnet.vxlan", "link podnet.wg",
		"route 10.244.1.0/24 via 198.18.0.2 proto 97",
		"nftables inet podnet", "nftables bridge podnet-guard", "nftables inet podnet-policy",
		"nftables inet podnet-closed", "nftables inet podnet-portmap",
		"state /s/ipam.db", "state /s/wireguard.key", "run /r/policy.sock", "run /w/podnet.wg.sock", "sysctl net/ipv4/ip_forward", "record /s/sysctls.json",
	}
	if !slices.Equal(got, want) {
		t.Errorf("steps\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if s := steps[14]; s.value != "0" || !strings.Contains(s.Detail, "restore 0") {
		t.Errorf("sysctl step %+v", s)
	}
	var keptTargets []string
	for _, k := range kept {
		keptTargets = append(keptTargets, k.Target)
	}
	if !slices.Equal(keptTargets, []string{"/c/10-calico.conflist", "/b/loopback", "net/ipv4/conf/all/rp_filter"}) {
		t.Errorf("kept %+v", kept)
	}
}

func TestPlanNothing(t *testing.T) {
	steps, kept := Plan(Found{Tables: []Table{{"inet", "other"}}, Configs: []File{{Path: "/c/x.conflist", Reason: "theirs"}},
		WireGuardSocket: &Socket{Path: "/w/podnet.wg.sock", Keep: "in use"}})
	if len(steps) != 0 || len(kept) != 2 {
		t.Errorf("steps %v kept %v", steps, kept)
	}
	if !(Report{}).Clean() {
		t.Error("empty report not clean")
	}
}

func TestPathsCheck(t *testing.T) {
	good := Paths{ConfDir: "/etc/cni/net.d", BinDir: "/opt/cni/bin", StateDir: "/var/lib/podnet", RunDir: "/run/podnet"}
	if err := good.Check(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []func(*Paths){
		func(p *Paths) { p.StateDir = "/var/lib" },
		func(p *Paths) { p.RunDir = "/run/" },
		func(p *Paths) { p.ConfDir = "net.d" },
		func(p *Paths) { p.BinDir = "" },
		func(p *Paths) { p.WireGuardDir = "run/wireguard" },
	} {
		p := good
		bad(&p)
		if err := p.Check(); err == nil {
			t.Errorf("accepted %+v", p)
		}
	}
}
