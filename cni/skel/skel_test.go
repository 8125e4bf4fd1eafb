package skel

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/podnet/podnet/cni"
)

const (
	conf11 = `{"cniVersion":"1.1.0","name":"net","type":"fake"}`
	conf10 = `{"cniVersion":"1.0.0","name":"net","type":"fake"}`
)

func baseEnv(cmd string) map[string]string {
	return map[string]string{
		"CNI_COMMAND":     cmd,
		"CNI_CONTAINERID": "c1",
		"CNI_NETNS":       "/run/netns/x",
		"CNI_IFNAME":      "eth0",
		"CNI_PATH":        "/opt/cni/bin:/usr/libexec/cni",
	}
}

// with returns env changed by kv pairs; an empty value removes the key.
func with(env map[string]string, kv ...string) map[string]string {
	out := maps.Clone(env)
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == "" {
			delete(out, kv[i])
		} else {
			out[kv[i]] = kv[i+1]
		}
	}
	return out
}

func testResult() *cni.Result {
	return &cni.Result{
		CNIVersion: "1.1.0",
		Interfaces: []*cni.Interface{{Name: "eth0", Mac: "02:00:00:00:00:01", Mtu: 1450, Sandbox: "/run/netns/x"}},
		IPs:        []*cni.IPConfig{{Interface: cni.IntPtr(0), Address: netip.MustParsePrefix("10.0.0.2/24")}},
		Routes:     []*cni.Route{{Dst: netip.MustParsePrefix("0.0.0.0/0"), MTU: 1400}},
	}
}

// outcome is what one run of a plugin did.
type outcome struct {
	status int
	stdout string
	stderr string
	called *CmdArgs // args of the handler call, nil if no handler ran
}

// fakeNS answers the namespace checks without root: paths starting with
// "/gone" do not exist, "/host" is the plugin's own namespace, "/file" is
// not a namespace.
func fakeNS(cmd cni.Verb, path string) (bool, error) {
	switch {
	case strings.HasPrefix(path, "/gone"):
		if cmd == cni.VerbDel {
			return true, nil
		}
		return false, cni.Errorf(cni.CodeUnknownContainer, "CNI_NETNS %s does not exist", path)
	case strings.HasPrefix(path, "/host"):
		return false, cni.Errorf(cni.CodeInvalidEnvironment, "CNI_NETNS %s is the plugin's own network namespace", path)
	case strings.HasPrefix(path, "/file"):
		if cmd == cni.VerbDel {
			return true, nil
		}
		return false, cni.Errorf(cni.CodeInvalidEnvironment, "CNI_NETNS: %s is not a network namespace", path)
	}
	return false, nil
}

func runPlugin(p *Plugin, env map[string]string, stdin string) outcome {
	var o outcome
	record := func(a *CmdArgs) { o.called = a }
	wrap := *p
	if p.Add != nil {
		wrap.Add = func(a *CmdArgs) (*cni.Result, error) { record(a); return p.Add(a) }
	}
	for _, h := range []*func(*CmdArgs) error{&wrap.Del, &wrap.Check, &wrap.Status, &wrap.GC} {
		if *h != nil {
			orig := *h
			*h = func(a *CmdArgs) error { record(a); return orig(a) }
		}
	}
	var stdout, stderr bytes.Buffer
	o.status = wrap.run(func(k string) string { return env[k] }, strings.NewReader(stdin), &stdout, &stderr, fakeNS)
	o.stdout, o.stderr = stdout.String(), stderr.String()
	return o
}

func okPlugin() *Plugin {
	return &Plugin{
		Add:    func(*CmdArgs) (*cni.Result, error) { return testResult(), nil },
		Del:    func(*CmdArgs) error { return nil },
		Check:  func(*CmdArgs) error { return nil },
		Status: func(*CmdArgs) error { return nil },
		GC:     func(*CmdArgs) error { return nil },
		About:  "fake plugin for tests",
	}
}

func TestRunErrors(t *testing.T) {
	long := strings.Repeat("a", 16)
	tests := []struct {
		name     string
		plugin   func(*Plugin)
		env      map[string]string
		stdin    string
		wantCode cni.Code
		wantMsg  []string // substrings of msg
		wantVer  string   // cniVersion of the error document; "" means 1.1.0
	}{
		{name: "no command", env: map[string]string{}, stdin: conf11, wantCode: 4, wantMsg: []string{"CNI_COMMAND"}},
		{name: "unknown command", env: with(baseEnv("ADD"), "CNI_COMMAND", "GET"), stdin: conf11, wantCode: 4, wantMsg: []string{"CNI_COMMAND", "GET"}},
		{name: "ADD without container id", env: with(baseEnv("ADD"), "CNI_CONTAINERID", ""), stdin: conf11, wantCode: 4, wantMsg: []string{"CNI_CONTAINERID"}},
		{name: "ADD without netns", env: with(baseEnv("ADD"), "CNI_NETNS", ""), stdin: conf11, wantCode: 4, wantMsg: []string{"CNI_NETNS"}},
		{name: "CHECK without netns", env: with(baseEnv("CHECK"), "CNI_NETNS", ""), stdin: conf11, wantCode: 4, wantMsg: []string{"CNI_NETNS"}},
		{name: "ADD without ifname", env: with(baseEnv("ADD"), "CNI_IFNAME", ""), stdin: conf11, wantCode: 4, wantMsg: []string{"CNI_IFNAME"}},
		{name: "ADD without path", env: with(baseEnv("ADD"), "CNI_PATH", ""), stdin: conf11, wantCode: 4, wantMsg: []string{"CNI_PATH"}},
		{name: "ADD with empty path list", env: with(baseEnv("ADD"), "CNI_PATH", "::"), stdin: conf11, wantCode: 4, wantMsg: []string{"CNI_PATH"}},
		{name: "DEL without container id", env: with(baseEnv("DEL"), "CNI_CONTAINERID", ""), stdin: conf11, wantCode: 4, wantMsg: []string{"CNI_CONTAINERID"}},
		{name: "DEL without ifname", env: with(baseEnv("DEL"), "CNI_IFNAME", ""), stdin: conf11, wantCode: 4, wantMsg: []string{"CNI_IFNAME"}},
		{name: "GC without path", env: map[string]string{"CNI_COMMAND": "GC"}, stdin: conf11, wantCode: 4, wantMsg: []string{"CNI_PATH"}},
		{name: "STATUS without path", env: map[string]string{"CNI_COMMAND": "STATUS"}, stdin: conf11, wantCode: 4, wantMsg: []string{"CNI_PATH"}},
		{name: "container id starts with dash", env: with(baseEnv("ADD"), "CNI_CONTAINERID", "-abc"), stdin: conf11, wantCode: 4, wantMsg: []string{"CNI_CONTAINERID"}},
		{name: "container id with space", env: with(baseEnv("ADD"), "CNI_CONTAINERID", "a b"), stdin: conf11, wantCode: 4, wantMsg: []string{"CNI_CONTAINERID"}},
		{name: "container id with slash", env: with(baseEnv("DEL"), "CNI_CONTAINERID", "a/../b"), stdin: conf11, wantCode: 4, wantMsg: []string{"CNI_CONTAINERID"}},
		{name: "ifname too long", env: with(baseEnv("ADD"), "CNI_IFNAME", long), stdin: conf11, wantCode: 4, wantMsg: []string{"CNI_IFNAME", "15"}},
		{name: "ifname dot", env: with(baseEnv("ADD"), "CNI_IFNAME", "."), stdin: conf11, wantCode: 4, wantMsg: []string{"CNI_IFNAME"}},
		{name: "ifname dotdot", env: with(baseEnv("ADD"), "CNI_IFNAME", ".."), stdin: conf11, wantCode: 4, wantMsg: []string{"CNI_IFNAME"}},
		{name: "ifname slash", env: with(baseEnv("ADD"), "CNI_IFNAME", "a/b"), stdin: conf11, wantCode: 4, wantMsg: []string{"CNI_IFNAME"}},
		{name: "ifname colon", env: with(baseEnv("ADD"), "CNI_IFNAME", "eth0:1"), stdin: conf11, wantCode: 4, wantMsg: []string{"CNI_IFNAME"}},
		{name: "ifname space", env: with(baseEnv("ADD"), "CNI_IFNAME", "a b"), stdin: conf11, wantCode: 4, wantMsg: []string{"CNI_IFNAME"}},
		{name: "ifname tab", env: with(baseEnv("ADD"), "CNI_IFNAME", "a\tb"), stdin: conf11, wantCode: 4, wantMsg: []string{"CNI_IFNAME"}},
		{name: "bad CNI_ARGS", env: with(baseEnv("ADD"), "CNI_ARGS", "IgnoreUnknown"), stdin: conf11, wantCode: 4, wantMsg: []string{"CNI_ARGS"}},
		{name: "empty stdin", env: baseEnv("ADD"), stdin: "", wantCode: 6},
		{name: "stdin not json", env: baseEnv("ADD"), stdin: "cniVersion: 1.1.0", wantCode: 6},
		{name: "stdin a list", env: baseEnv("ADD"), stdin: "[]", wantCode: 6},
		{name: "stdin null", env: baseEnv("DEL"), stdin: "null", wantCode: 6},
		{name: "no cniVersion", env: baseEnv("ADD"), stdin: `{"name":"net","type":"fake"}`, wantCode: 7, wantMsg: []string{"cniVersion"}},
		{name: "no name", env: baseEnv("ADD"), stdin: `{"cniVersion":"1.0.0","type":"fake"}`, wantCode: 7, wantMsg: []string{"name"}, wantVer: "1.0.0"},
		{name: "no type", env: baseEnv("ADD"), stdin: `{"cniVersion":"1.0.0","name":"net"}`, wantCode: 7, wantMsg: []string{"type"}, wantVer: "1.0.0"},
		{name: "bad name", env: baseEnv("ADD"), stdin: `{"cniVersion":"1.0.0","name":"-net","type":"fake"}`, wantCode: 7, wantMsg: []string{"name"}, wantVer: "1.0.0"},
		{name: "name a number", env: baseEnv("ADD"), stdin: `{"cniVersion":"1.0.0","name":5,"type":"fake"}`, wantCode: 7, wantMsg: []string{"name"}},
		{name: "cniVersion a number", env: baseEnv("ADD"), stdin: `{"cniVersion":1.0,"name":"net","type":"fake"}`, wantCode: 7, wantMsg: []string{"cniVersion"}},
		{name: "unsupported version", env: baseEnv("ADD"), stdin: `{"cniVersion":"0.2.0","name":"net","type":"fake"}`, wantCode: 1, wantMsg: []string{"0.2.0", "1.1.0"}},
		{name: "future version", env: baseEnv("ADD"), stdin: `{"cniVersion":"2.0.0","name":"net","type":"fake"}`, wantCode: 1, wantMsg: []string{"2.0.0"}},
		{name: "garbage version", env: baseEnv("ADD"), stdin: `{"cniVersion":"banana","name":"net","type":"fake"}`, wantCode: 1, wantMsg: []string{"banana"}},
		{
			name: "version the plugin does not speak", plugin: func(p *Plugin) { p.Versions = []string{"0.3.1", "0.4.0"} },
			env: baseEnv("ADD"), stdin: conf10, wantCode: 1, wantMsg: []string{"1.0.0", "0.3.1, 0.4.0"}, wantVer: "0.4.0",
		},
		{name: "CHECK before 0.4.0", env: baseEnv("CHECK"), stdin: `{"cniVersion":"0.3.1","name":"net","type":"fake"}`, wantCode: 1, wantMsg: []string{"CHECK"}, wantVer: "0.3.1"},
		{name: "STATUS before 1.1.0", env: map[string]string{"CNI_COMMAND": "STATUS", "CNI_PATH": "/x"}, stdin: conf10, wantCode: 1, wantMsg: []string{"STATUS"}, wantVer: "1.0.0"},
		{name: "GC before 1.1.0", env: map[string]string{"CNI_COMMAND": "GC", "CNI_PATH": "/x"}, stdin: conf10, wantCode: 1, wantMsg: []string{"GC"}, wantVer: "1.0.0"},
		{name: "VERSION with garbage stdin", env: map[string]string{"CNI_COMMAND": "VERSION"}, stdin: "{", wantCode: 6},
		{name: "VERSION with bad version", env: map[string]string{"CNI_COMMAND": "VERSION"}, stdin: `{"cniVersion":"x.y"}`, wantCode: 1},
		{name: "ADD netns missing", env: with(baseEnv("ADD"), "CNI_NETNS", "/gone/1"), stdin: conf11, wantCode: 3, wantMsg: []string{"/gone/1"}},
		{name: "CHECK netns missing", env: with(baseEnv("CHECK"), "CNI_NETNS", "/gone/1"), stdin: conf11, wantCode: 3},
		{name: "ADD netns is own", env: with(baseEnv("ADD"), "CNI_NETNS", "/host"), stdin: conf11, wantCode: 4, wantMsg: []string{"/host"}},
		{name: "DEL netns is own", env: with(baseEnv("DEL"), "CNI_NETNS", "/host"), stdin: conf11, wantCode: 4},
		{name: "ADD netns is a file", env: with(baseEnv("ADD"), "CNI_NETNS", "/file"), stdin: conf11, wantCode: 4},
		{
			name: "bad prevResult on ADD", env: baseEnv("ADD"),
			stdin: `{"cniVersion":"1.0.0","name":"net","type":"fake","prevResult":{"cniVersion":"1.0.0","ips":[{"address":"nope"}]}}`, wantCode: 6, wantMsg: []string{"prevResult"}, wantVer: "1.0.0",
		},
		{name: "ADD handler CNI error", plugin: func(p *Plugin) {
			p.Add = func(*CmdArgs) (*cni.Result, error) {
				return nil, cni.Errorf(cni.CodeInvalidNetworkConfig, "bad subnet")
			}
		}, env: baseEnv("ADD"), stdin: conf10, wantCode: 7, wantMsg: []string{"bad subnet"}, wantVer: "1.0.0"},
		{name: "ADD handler wrapped CNI error", plugin: func(p *Plugin) {
			p.Add = func(*CmdArgs) (*cni.Result, error) {
				return nil, errors.Join(errors.New("context"), cni.Errorf(cni.CodeTryAgainLater, "busy"))
			}
		}, env: baseEnv("ADD"), stdin: conf11, wantCode: 11, wantMsg: []string{"busy"}},
		{name: "DEL handler plain error", plugin: func(p *Plugin) {
			p.Del = func(*CmdArgs) error { return errors.New("netlink said no") }
		}, env: baseEnv("DEL"), stdin: conf11, wantCode: 100, wantMsg: []string{"netlink said no"}},
		{name: "ADD handler panics", plugin: func(p *Plugin) {
			p.Add = func(*CmdArgs) (*cni.Result, error) { panic("index out of range") }
		}, env: baseEnv("ADD"), stdin: conf11, wantCode: 100, wantMsg: []string{"panic", "index out of range"}},
		{name: "CHECK handler panics", plugin: func(p *Plugin) {
			p.Check = func(a *CmdArgs) error { _ = a.Path[len(a.Path)+1]; return nil }
		}, env: baseEnv("CHECK"), stdin: conf11, wantCode: 100, wantMsg: []string{"panic"}},
		{name: "ADD returns no result", plugin: func(p *Plugin) {
			p.Add = func(*CmdArgs) (*cni.Result, error) { return nil, nil }
		}, env: baseEnv("ADD"), stdin: conf11, wantCode: 100, wantMsg: []string{"no result"}},
		{name: "ADD returns invalid result", plugin: func(p *Plugin) {
			p.Add = func(*CmdArgs) (*cni.Result, error) {
				return &cni.Result{IPs: []*cni.IPConfig{{Interface: cni.IntPtr(3), Address: netip.MustParsePrefix("10.0.0.2/24")}}}, nil
			}
		}, env: baseEnv("ADD"), stdin: conf11, wantCode: 100, wantMsg: []string{"invalid result"}},
		{name: "ADD not implemented", plugin: func(p *Plugin) { p.Add = nil }, env: baseEnv("ADD"), stdin: conf11, wantCode: 100, wantMsg: []string{"ADD"}},
		{name: "CHECK not implemented", plugin: func(p *Plugin) { p.Check = nil }, env: baseEnv("CHECK"), stdin: conf11, wantCode: 100, wantMsg: []string{"CHECK"}},
		{name: "STATUS not available", plugin: func(p *Plugin) {
			p.Status = func(*CmdArgs) error { return cni.Errorf(cni.CodePluginNotAvailable, "store unreachable") }
		}, env: map[string]string{"CNI_COMMAND": "STATUS", "CNI_PATH": "/x"}, stdin: conf11, wantCode: 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := okPlugin()
			if tt.plugin != nil {
				tt.plugin(p)
			}
			o := runPlugin(p, tt.env, tt.stdin)
			if o.status != 1 {
				t.Fatalf("exit status %d, want 1; stdout %q", o.status, o.stdout)
			}
			var e cni.Error
			dec := json.NewDecoder(strings.NewReader(o.stdout))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&e); err != nil {
				t.Fatalf("stdout is not one error document: %v: %q", err, o.stdout)
			}
			if dec.More() {
				t.Fatalf("stdout holds more than the error document: %q", o.stdout)
			}
			if e.Code != tt.wantCode {
				t.Errorf("code %d (%s), want %d", e.Code, e.Msg, tt.wantCode)
			}
			for _, s := range tt.wantMsg {
				if !strings.Contains(e.Msg, s) {
					t.Errorf("msg %q does not mention %q", e.Msg, s)
				}
			}
			wantVer := tt.wantVer
			if wantVer == "" {
				wantVer = "1.1.0"
			}
			if e.CNIVersion != wantVer {
				t.Errorf("error cniVersion %q, want %q", e.CNIVersion, wantVer)
			}
		})
	}
}

func TestRunNoCommandPrintsAbout(t *testing.T) {
	o := runPlugin(okPlugin(), map[string]string{}, "")
	if !strings.Contains(o.stderr, "fake plugin for tests") || !strings.Contains(o.stderr, "1.1.0") {
		t.Fatalf("stderr %q lacks the about text and versions", o.stderr)
	}
}

func TestRunSuccess(t *testing.T) {
	tests := []struct {
		name    string
		plugin  func(*Plugin)
		env     map[string]string
		stdin   string
		wantOut string // exact stdout, or "" for none; "*" to skip
		check   func(t *testing.T, a *CmdArgs, stdout string)
	}{
		{
			name: "ADD at 1.1.0", env: with(baseEnv("ADD"), "CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAME=p"), stdin: conf11, wantOut: "*",
			check: func(t *testing.T, a *CmdArgs, out string) {
				if a.ContainerID != "c1" || a.IfName != "eth0" || a.Netns != "/run/netns/x" || a.NetnsGone {
					t.Errorf("args %+v", a)
				}
				if len(a.Path) != 2 || a.Path[1] != "/usr/libexec/cni" {
					t.Errorf("path %q", a.Path)
				}
				if len(a.ArgsPairs) != 2 || a.ArgsPairs[1] != [2]string{"K8S_POD_NAME", "p"} || a.Args != "IgnoreUnknown=1;K8S_POD_NAME=p" {
					t.Errorf("args pairs %q", a.ArgsPairs)
				}
				if string(a.StdinData) != conf11 || a.NetConf.Name != "net" || a.NetConf.Type != "fake" {
					t.Errorf("stdin %q, conf %+v", a.StdinData, a.NetConf)
				}
				r, err := cni.ParseResult([]byte(out))
				if err != nil || r.CNIVersion != "1.1.0" || r.Interfaces[0].Mtu != 1450 {
					t.Errorf("result %s: %v", out, err)
				}
			},
		},
		{
			name: "ADD converts the result down to 0.4.0", env: baseEnv("ADD"), stdin: `{"cniVersion":"0.4.0","name":"net","type":"fake"}`,
			wantOut: `{"cniVersion":"0.4.0","interfaces":[{"name":"eth0","mac":"02:00:00:00:00:01","sandbox":"/run/netns/x"}],"ips":[{"version":"4","interface":0,"address":"10.0.0.2/24"}],"routes":[{"dst":"0.0.0.0/0"}]}` + "\n",
		},
		{
			name: "ADD converts the result down to 1.0.0", env: baseEnv("ADD"), stdin: conf10,
			wantOut: `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","mac":"02:00:00:00:00:01","sandbox":"/run/netns/x"}],"ips":[{"interface":0,"address":"10.0.0.2/24"}],"routes":[{"dst":"0.0.0.0/0"}]}` + "\n",
		},
		{
			name: "ADD with an older prevResult", env: baseEnv("ADD"),
			stdin:   `{"cniVersion":"1.1.0","name":"net","type":"fake","prevResult":{"cniVersion":"0.3.1","interfaces":[{"name":"eth0"}],"ips":[{"version":"4","interface":0,"address":"10.1.0.5/16","gateway":"10.1.0.1"}]}}`,
			wantOut: "*",
			check: func(t *testing.T, a *CmdArgs, _ string) {
				pr := a.NetConf.PrevResult
				if pr == nil || pr.CNIVersion != "1.1.0" || len(pr.IPs) != 1 || pr.IPs[0].Gateway != netip.MustParseAddr("10.1.0.1") {
					t.Errorf("prevResult %+v", pr)
				}
			},
		},
		{
			name: "ADD with null prevResult", env: baseEnv("ADD"),
			stdin: `{"cniVersion":"1.1.0","name":"net","type":"fake","prevResult":null}`, wantOut: "*",
			check: func(t *testing.T, a *CmdArgs, _ string) {
				if a.NetConf.PrevResult != nil || a.NetConf.RawPrevResult != nil {
					t.Errorf("prevResult %+v", a.NetConf.PrevResult)
				}
			},
		},
		{name: "DEL", env: baseEnv("DEL"), stdin: conf11},
		{
			name: "DEL without netns", env: with(baseEnv("DEL"), "CNI_NETNS", ""), stdin: conf11,
			check: func(t *testing.T, a *CmdArgs, _ string) {
				if a.Netns != "" || a.NetnsGone {
					t.Errorf("netns %q gone %v", a.Netns, a.NetnsGone)
				}
			},
		},
		{
			name: "DEL with the netns gone", env: with(baseEnv("DEL"), "CNI_NETNS", "/gone/1"), stdin: conf11,
			check: func(t *testing.T, a *CmdArgs, _ string) {
				if a.Netns != "/gone/1" || !a.NetnsGone {
					t.Errorf("netns %q gone %v", a.Netns, a.NetnsGone)
				}
			},
		},
		{
			name: "DEL with a leftover mount point", env: with(baseEnv("DEL"), "CNI_NETNS", "/file"), stdin: conf11,
			check: func(t *testing.T, a *CmdArgs, _ string) {
				if !a.NetnsGone {
					t.Error("NetnsGone not set")
				}
			},
		},
		{
			name: "DEL with a broken prevResult", env: baseEnv("DEL"),
			stdin: `{"cniVersion":"1.1.0","name":"net","type":"fake","prevResult":{"cniVersion":"1.1.0","ips":[{"address":"x"}]}}`,
			check: func(t *testing.T, a *CmdArgs, _ string) {
				if a.NetConf.PrevResult != nil || a.NetConf.RawPrevResult == nil {
					t.Error("a broken prevResult should be left raw for DEL")
				}
			},
		},
		{name: "CHECK at 0.4.0", env: baseEnv("CHECK"), stdin: `{"cniVersion":"0.4.0","name":"net","type":"fake"}`},
		{name: "valid odd names", env: with(baseEnv("ADD"), "CNI_CONTAINERID", "Abc_1.2-3", "CNI_IFNAME", "abcdefghijklmno"), stdin: conf11, wantOut: "*"},
		{name: "STATUS", env: map[string]string{"CNI_COMMAND": "STATUS", "CNI_PATH": "/x"}, stdin: conf11},
		{name: "STATUS without handler", plugin: func(p *Plugin) { p.Status = nil }, env: map[string]string{"CNI_COMMAND": "STATUS", "CNI_PATH": "/x"}, stdin: conf11},
		{
			name: "GC with attachments", env: map[string]string{"CNI_COMMAND": "GC", "CNI_PATH": "/x", "CNI_CONTAINERID": "ignored/invalid"},
			stdin: `{"cniVersion":"1.1.0","name":"net","type":"fake","cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"}]}`,
			check: func(t *testing.T, a *CmdArgs, _ string) {
				if len(a.NetConf.ValidAttachments) != 1 || a.NetConf.ValidAttachments[0] != (cni.GCAttachment{ContainerID: "c1", IfName: "eth0"}) {
					t.Errorf("attachments %+v", a.NetConf.ValidAttachments)
				}
			},
		},
		{name: "GC without handler", plugin: func(p *Plugin) { p.GC = nil }, env: map[string]string{"CNI_COMMAND": "GC", "CNI_PATH": "/x"}, stdin: conf11},
		{
			name: "VERSION", env: map[string]string{"CNI_COMMAND": "VERSION"}, stdin: "",
			wantOut: `{"cniVersion":"1.1.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}` + "\n",
		},
		{
			name: "VERSION with a request", env: map[string]string{"CNI_COMMAND": "VERSION"}, stdin: `{"cniVersion":"0.4.0"}`,
			wantOut: `{"cniVersion":"1.1.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}` + "\n",
		},
		{
			name: "VERSION of an old plugin", plugin: func(p *Plugin) { p.Versions = []string{"0.3.1", "0.4.0"} },
			env: map[string]string{"CNI_COMMAND": "VERSION"}, stdin: `{"cniVersion":"1.1.0"}`,
			wantOut: `{"cniVersion":"0.4.0","supportedVersions":["0.3.1","0.4.0"]}` + "\n",
		},
		{
			name: "handler logs go to stderr", plugin: func(p *Plugin) {
				p.Del = func(a *CmdArgs) error { _, err := a.Stderr.Write([]byte("deleting\n")); return err }
			}, env: baseEnv("DEL"), stdin: conf11,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := okPlugin()
			if tt.plugin != nil {
				tt.plugin(p)
			}
			o := runPlugin(p, tt.env, tt.stdin)
			if o.status != 0 {
				t.Fatalf("exit status %d; stdout %q; stderr %q", o.status, o.stdout, o.stderr)
			}
			if tt.wantOut != "*" && !sameJSON(o.stdout, tt.wantOut) {
				t.Errorf("stdout\n got %q\nwant %q", o.stdout, tt.wantOut)
			}
			if tt.env["CNI_COMMAND"] != "VERSION" && o.called == nil && !strings.Contains(tt.name, "without handler") {
				t.Fatal("handler not called")
			}
			if tt.check != nil {
				tt.check(t, o.called, o.stdout)
			}
		})
	}
}

// sameJSON compares documents, ignoring the order of object keys, and
// requires the one trailing newline skel writes.
func sameJSON(got, want string) bool {
	if got == want {
		return true
	}
	if !strings.HasSuffix(got, "}\n") || strings.Count(got, "\n") != 1 {
		return false
	}
	var g, w any
	if json.Unmarshal([]byte(got), &g) != nil || json.Unmarshal([]byte(want), &w) != nil {
		return false
	}
	return reflect.DeepEqual(g, w)
}

// TestHandlerNotCalledOnBadInput makes sure that no rejected invocation
// reaches a handler: in particular not one with a bad namespace.
func TestHandlerNotCalledOnBadInput(t *testing.T) {
	for _, env := range []map[string]string{
		with(baseEnv("ADD"), "CNI_NETNS", "/host"),
		with(baseEnv("ADD"), "CNI_NETNS", "/gone"),
		with(baseEnv("CHECK"), "CNI_NETNS", "/file"),
		with(baseEnv("DEL"), "CNI_NETNS", "/host"),
		with(baseEnv("ADD"), "CNI_IFNAME", "a/b"),
	} {
		if o := runPlugin(okPlugin(), env, conf11); o.called != nil || o.status == 0 {
			t.Errorf("%v: handler called (%v) or success (%d)", env, o.called != nil, o.status)
		}
	}
}
