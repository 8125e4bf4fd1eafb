package cni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// fakeExec records calls and answers per plugin type and verb. It tests
// the chaining logic only; exec_test.go runs real processes.
type fakeExec struct {
	mu    sync.Mutex
	calls []fakeCall
	// answer returns stdout or an error for a call.
	answer func(c fakeCall) ([]byte, error)
}

type fakeCall struct {
	Plugin string
	Verb   string
	Conf   map[string]json.RawMessage
	Env    map[string]string
}

func (f *fakeExec) FindInPath(plugin string, dirs []string) (string, error) {
	if plugin == "missing" {
		return "", runtimeErrorf(CodePluginNotFound, "plugin %q not found", plugin)
	}
	return "/fake/" + plugin, nil
}

func (f *fakeExec) ExecPlugin(ctx context.Context, path string, stdin []byte, env []string) ([]byte, error) {
	c := fakeCall{Plugin: filepath.Base(path), Env: map[string]string{}}
	if err := json.Unmarshal(stdin, &c.Conf); err != nil {
		return nil, err
	}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "CNI_") {
			c.Env[k] = v
		}
	}
	c.Verb = c.Env["CNI_COMMAND"]
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
	if f.answer != nil {
		return f.answer(c)
	}
	return defaultAnswer(c)
}

// defaultAnswer: ADD appends an interface named after the plugin to
// prevResult, other verbs succeed silently.
func defaultAnswer(c fakeCall) ([]byte, error) {
	if c.Verb != "ADD" {
		return nil, nil
	}
	var version string
	_ = json.Unmarshal(c.Conf["cniVersion"], &version)
	res := &Result{CNIVersion: version}
	if raw, ok := c.Conf["prevResult"]; ok {
		prev, err := ParseResult(raw)
		if err != nil {
			return nil, err
		}
		res = prev
	}
	res.Interfaces = append(res.Interfaces, &Interface{Name: c.Plugin})
	return res.Bytes(), nil
}

func (f *fakeExec) sequence() string {
	var s []string
	for _, c := range f.calls {
		s = append(s, c.Verb+":"+c.Plugin)
	}
	return strings.Join(s, " ")
}

func chain(t *testing.T, version string, types ...string) *NetworkConfigList {
	t.Helper()
	var plugins []string
	for _, typ := range types {
		plugins = append(plugins, fmt.Sprintf(`{"type":%q,"capabilities":{"portMappings":true}}`, typ))
	}
	l, err := ParseNetworkConfigList([]byte(fmt.Sprintf(`{"name":"net1","cniVersion":%q,"plugins":[%s]}`, version, strings.Join(plugins, ","))), "test")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func newTestRuntime(t *testing.T, f *fakeExec, opts ...Option) *Runtime {
	return NewRuntime([]string{"/fake"}, append([]Option{WithExec(f), WithCacheDir(t.TempDir())}, opts...)...)
}

var rtConf = &RuntimeConf{ContainerID: "c1", NetNS: "/run/netns/x", IfName: "eth0", Args: [][2]string{{"IgnoreUnknown", "1"}},
	CapabilityArgs: map[string]any{"portMappings": []any{map[string]any{"hostPort": 8080.0}}}}

func TestAddDelChain(t *testing.T) {
	f := &fakeExec{}
	r := newTestRuntime(t, f)
	list := chain(t, "1.1.0", "a", "b", "c")
	res, err := r.AddNetworkList(context.Background(), list, rtConf)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Interfaces) != 3 || res.Interfaces[2].Name != "c" {
		t.Fatalf("result %s", res.Bytes())
	}
	// Each plugin sees the previous one's result and the capability args
	// it declared; environment per the spec.
	if _, ok := f.calls[0].Conf["prevResult"]; ok {
		t.Error("first plugin got a prevResult")
	}
	if !strings.Contains(string(f.calls[2].Conf["prevResult"]), `"name":"b"`) {
		t.Errorf("third plugin's prevResult: %s", f.calls[2].Conf["prevResult"])
	}
	if !strings.Contains(string(f.calls[1].Conf["runtimeConfig"]), `"hostPort":8080`) {
		t.Errorf("runtimeConfig: %s", f.calls[1].Conf["runtimeConfig"])
	}
	env := f.calls[0].Env
	if env["CNI_CONTAINERID"] != "c1" || env["CNI_IFNAME"] != "eth0" || env["CNI_NETNS"] != "/run/netns/x" || env["CNI_ARGS"] != "IgnoreUnknown=1" || env["CNI_PATH"] != "/fake" {
		t.Errorf("env %v", env)
	}

	a, err := r.CachedAttachment("net1", rtConf)
	if err != nil || a == nil || a.Result == nil || len(a.Result.Interfaces) != 3 {
		t.Fatalf("cache: %+v %v", a, err)
	}

	f.calls = nil
	if err := r.DelNetworkList(context.Background(), list, rtConf); err != nil {
		t.Fatal(err)
	}
	if got := f.sequence(); got != "DEL:c DEL:b DEL:a" {
		t.Errorf("DEL order %q", got)
	}
	for _, c := range f.calls {
		if !strings.Contains(string(c.Conf["prevResult"]), `"name":"c"`) {
			t.Errorf("DEL %s did not get the cached result", c.Plugin)
		}
	}
	if a, _ := r.CachedAttachment("net1", rtConf); a != nil {
		t.Error("cache entry survived DEL")
	}
	// DEL again: idempotent, no prevResult any more.
	f.calls = nil
	if err := r.DelNetworkList(context.Background(), list, rtConf); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.calls[0].Conf["prevResult"]; ok {
		t.Error("second DEL got a prevResult")
	}
}

func TestAddConvertsOlderPluginResult(t *testing.T) {
	f := &fakeExec{answer: func(c fakeCall) ([]byte, error) {
		return []byte(`{"cniVersion":"0.3.1","ips":[{"version":"4","address":"10.1.0.2/24"}]}`), nil
	}}
	r := newTestRuntime(t, f)
	res, err := r.AddNetworkList(context.Background(), chain(t, "1.0.0", "old"), rtConf)
	if err != nil {
		t.Fatal(err)
	}
	if res.CNIVersion != "1.0.0" || strings.Contains(string(res.Bytes()), `"version"`) {
		t.Fatalf("not converted: %s", res.Bytes())
	}
}

func TestAddFailureRollsBack(t *testing.T) {
	f := &fakeExec{answer: func(c fakeCall) ([]byte, error) {
		if c.Verb == "ADD" && c.Plugin == "b" {
			return nil, Errorf(CodeTryAgainLater, "b is busy")
		}
		if c.Verb == "DEL" && c.Plugin == "a" {
			return nil, Errorf(CodeIOFailure, "a cannot clean up")
		}
		return defaultAnswer(c)
	}}
	r := newTestRuntime(t, f)
	list := chain(t, "1.1.0", "a", "b", "c")
	_, err := r.AddNetworkList(context.Background(), list, rtConf)
	if got := f.sequence(); got != "ADD:a ADD:b DEL:b DEL:a" {
		t.Errorf("calls %q", got)
	}
	if CodeOf(err) != CodeTryAgainLater {
		t.Errorf("code %d, want the ADD's 11", CodeOf(err))
	}
	var pe *PluginError
	if !errors.As(err, &pe) || pe.Plugin != "b" || pe.Index != 1 || pe.Verb != "ADD" {
		t.Errorf("plugin error %+v", pe)
	}
	for _, want := range []string{`plugin "b" (#1) ADD: b is busy`, "rollback after failed ADD", `plugin "a" (#0) DEL: a cannot clean up`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if a, _ := r.CachedAttachment("net1", rtConf); a != nil {
		t.Error("failed ADD left a cache entry")
	}

	// Without rollback, nothing is undone.
	f.calls = nil
	r = newTestRuntime(t, f, WithRollback(false))
	_, _ = r.AddNetworkList(context.Background(), list, rtConf)
	if got := f.sequence(); got != "ADD:a ADD:b" {
		t.Errorf("calls without rollback %q", got)
	}
}

func TestAddInvalidResultIsDecodeError(t *testing.T) {
	for name, out := range map[string]string{"null": "null", "empty": "", "garbage": "{{{", "bad ip": `{"ips":[null]}`} {
		t.Run(name, func(t *testing.T) {
			f := &fakeExec{answer: func(c fakeCall) ([]byte, error) {
				if c.Verb == "ADD" {
					return []byte(out), nil
				}
				return nil, nil
			}}
			_, err := newTestRuntime(t, f).AddNetworkList(context.Background(), chain(t, "1.0.0", "bad"), rtConf)
			if CodeOf(err) != CodeInvalidResult || !errors.Is(err, ErrInvalidResult) || !strings.Contains(err.Error(), `plugin "bad"`) {
				t.Fatalf("got code %d: %v", CodeOf(err), err)
			}
			if got := f.sequence(); got != "ADD:bad DEL:bad" {
				t.Errorf("calls %q", got)
			}
		})
	}
}

func TestAddAcceptsResultWithoutVersion(t *testing.T) {
	f := &fakeExec{answer: func(c fakeCall) ([]byte, error) {
		return []byte(`{"ips":[{"address":"10.1.0.2/24"}]}`), nil
	}}
	res, err := newTestRuntime(t, f).AddNetworkList(context.Background(), chain(t, "0.4.0", "lax"), rtConf)
	if err != nil || res.CNIVersion != "0.4.0" || len(res.IPs) != 1 {
		t.Fatalf("%v %v", res, err)
	}
}

func TestPluginCodesAreNotRuntimeFailures(t *testing.T) {
	// A third-party plugin may use 101 for its own purpose: that is not
	// "plugin not found".
	f := &fakeExec{answer: func(c fakeCall) ([]byte, error) {
		return nil, &Error{Code: CodePluginNotFound, Msg: "my own code 101"}
	}}
	_, err := newTestRuntime(t, f).AddNetworkList(context.Background(), chain(t, "1.0.0", "third-party"), rtConf)
	if errors.Is(err, ErrPluginNotFound) {
		t.Error("a plugin's code 101 read as the runtime's plugin-not-found")
	}
	_, err = newTestRuntime(t, &fakeExec{}).AddNetworkList(context.Background(), chain(t, "1.0.0", "missing"), rtConf)
	if !errors.Is(err, ErrPluginNotFound) {
		t.Errorf("missing plugin: %v", err)
	}
}

func TestDelContinuesPastFailures(t *testing.T) {
	f := &fakeExec{}
	r := newTestRuntime(t, f)
	list := chain(t, "1.0.0", "a", "b", "c")
	if _, err := r.AddNetworkList(context.Background(), list, rtConf); err != nil {
		t.Fatal(err)
	}
	f.calls = nil
	f.answer = func(c fakeCall) ([]byte, error) {
		if c.Plugin == "b" {
			return nil, Errorf(CodeIOFailure, "b stuck")
		}
		return nil, nil
	}
	err := r.DelNetworkList(context.Background(), list, rtConf)
	if err == nil || f.sequence() != "DEL:c DEL:b DEL:a" {
		t.Fatalf("err %v calls %q", err, f.sequence())
	}
	if a, _ := r.CachedAttachment("net1", rtConf); a == nil {
		t.Error("cache entry removed although DEL failed; a retry would lose prevResult")
	}
}

func TestDelWithCorruptCache(t *testing.T) {
	for name, content := range map[string]string{"empty": "", "garbage": "\x00\x01", "wrong kind": `{"kind":"other"}`, "bad result": `{"kind":"cniCacheV1","result":{"cniVersion":"1.0.0","ips":[null]}}`} {
		t.Run(name, func(t *testing.T) {
			f := &fakeExec{}
			r := newTestRuntime(t, f)
			p := cachePath(r.CacheDir(), "net1", "c1", "eth0")
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := r.DelNetworkList(context.Background(), chain(t, "1.0.0", "a"), rtConf); err != nil {
				t.Fatalf("corrupt cache blocked DEL: %v", err)
			}
			if _, err := os.Stat(p); !os.IsNotExist(err) {
				t.Error("corrupt entry not removed")
			}
		})
	}
}

func TestCheck(t *testing.T) {
	f := &fakeExec{}
	r := newTestRuntime(t, f)
	list := chain(t, "1.0.0", "a", "b")
	if err := r.CheckNetworkList(context.Background(), list, rtConf); CodeOf(err) != CodeUnknownContainer {
		t.Errorf("CHECK without cache: %v", err)
	}
	if _, err := r.AddNetworkList(context.Background(), list, rtConf); err != nil {
		t.Fatal(err)
	}
	f.calls = nil
	if err := r.CheckNetworkList(context.Background(), list, rtConf); err != nil {
		t.Fatal(err)
	}
	if f.sequence() != "CHECK:a CHECK:b" || !strings.Contains(string(f.calls[0].Conf["prevResult"]), `"name":"b"`) {
		t.Errorf("calls %q", f.sequence())
	}
	list.DisableCheck = true
	f.calls = nil
	if err := r.CheckNetworkList(context.Background(), list, rtConf); err != nil || len(f.calls) != 0 {
		t.Errorf("disableCheck: %v %q", err, f.sequence())
	}
	if err := r.CheckNetworkList(context.Background(), chain(t, "0.3.1", "a"), rtConf); CodeOf(err) != CodeIncompatibleVersion {
		t.Errorf("CHECK at 0.3.1: %v", err)
	}
}

func TestStatus(t *testing.T) {
	f := &fakeExec{answer: func(c fakeCall) ([]byte, error) {
		if c.Plugin == "b" {
			return nil, Errorf(CodePluginNotAvailable, "no pools")
		}
		return nil, nil
	}}
	r := newTestRuntime(t, f)
	err := r.StatusNetworkList(context.Background(), chain(t, "1.1.0", "a", "b", "c"))
	if CodeOf(err) != CodePluginNotAvailable || f.sequence() != "STATUS:a STATUS:b STATUS:c" {
		t.Errorf("err %v calls %q", err, f.sequence())
	}
	if len(f.calls[0].Env) != 2 {
		t.Errorf("STATUS env has more than CNI_COMMAND and CNI_PATH: %v", f.calls[0].Env)
	}
	f.calls = nil
	if err := r.StatusNetworkList(context.Background(), chain(t, "1.0.0", "b")); err != nil || len(f.calls) != 0 {
		t.Errorf("STATUS at 1.0.0 must be a no-op: %v", err)
	}
}

func TestGC(t *testing.T) {
	f := &fakeExec{}
	r := newTestRuntime(t, f)
	list := chain(t, "1.1.0", "a", "b")
	other := chain(t, "1.1.0", "x")
	other.Name = "net2"
	for _, id := range []string{"keep", "stale1", "stale2"} {
		if _, err := r.AddNetworkList(context.Background(), list, &RuntimeConf{ContainerID: id, NetNS: "/x", IfName: "eth0"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.AddNetworkList(context.Background(), other, &RuntimeConf{ContainerID: "stale1", NetNS: "/x", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	f.calls = nil
	f.answer = func(c fakeCall) ([]byte, error) {
		if c.Verb == "DEL" && c.Env["CNI_CONTAINERID"] == "stale2" && c.Plugin == "b" {
			return nil, Errorf(CodeIOFailure, "stuck")
		}
		if c.Verb == "GC" && c.Plugin == "a" {
			return nil, Errorf(CodeIOFailure, "gc a failed")
		}
		return nil, nil
	}
	err := r.GCNetworkList(context.Background(), list, []GCAttachment{{ContainerID: "keep", IfName: "eth0"}})
	if err == nil || !strings.Contains(err.Error(), "stale2") || !strings.Contains(err.Error(), "gc a failed") {
		t.Errorf("GC must report every failure: %v", err)
	}
	var gcCalls int
	for _, c := range f.calls {
		if c.Verb == "DEL" && c.Env["CNI_CONTAINERID"] == "keep" {
			t.Error("valid attachment deleted")
		}
		if c.Verb == "GC" {
			gcCalls++
			if string(c.Conf["cni.dev/valid-attachments"]) != `[{"containerID":"keep","ifname":"eth0"}]` {
				t.Errorf("valid attachments %s", c.Conf["cni.dev/valid-attachments"])
			}
		}
	}
	if gcCalls != 2 {
		t.Errorf("%d GC calls, want 2", gcCalls)
	}
	left, _ := r.CachedAttachments("", "")
	var ids []string
	for _, a := range left {
		ids = append(ids, a.Network+"/"+a.ContainerID)
	}
	if strings.Join(ids, " ") != "net1/keep net1/stale2 net2/stale1" {
		t.Errorf("cache after GC: %v", ids)
	}
	// disableGC
	f.calls = nil
	list.DisableGC = true
	if err := r.GCNetworkList(context.Background(), list, nil); err != nil || len(f.calls) != 0 {
		t.Errorf("disableGC: %v %q", err, f.sequence())
	}
}

func TestRuntimeConfValidation(t *testing.T) {
	r := newTestRuntime(t, &fakeExec{})
	list := chain(t, "1.0.0", "a")
	for _, rt := range []*RuntimeConf{nil, {NetNS: "/x", IfName: "eth0"}, {ContainerID: "c", NetNS: "/x"}, {ContainerID: "c", IfName: "eth0"}, {ContainerID: "../c", NetNS: "/x", IfName: "eth0"}} {
		if _, err := r.AddNetworkList(context.Background(), list, rt); CodeOf(err) != CodeInvalidEnvironment {
			t.Errorf("AddNetworkList(%+v): %v", rt, err)
		}
	}
	if _, err := r.AddNetworkList(context.Background(), chain(t, "1.0.0", "missing"), rtConf); CodeOf(err) != CodePluginNotFound {
		t.Errorf("missing plugin: %v", err)
	}
}

// What an ADD cached under RuntimeConf.CacheDir is listed from that
// directory, and only from there: tear-down and GC of a caller that keeps
// its own cache dir must find it, and the Runtime's dir must not.
func TestCachedAttachmentsPerCallCacheDir(t *testing.T) {
	r := newTestRuntime(t, &fakeExec{})
	own := t.TempDir()
	list := chain(t, "1.1.0", "a")
	rt := &RuntimeConf{ContainerID: "c9", NetNS: "/x", IfName: "eth0", CacheDir: own}
	if _, err := r.AddNetworkList(context.Background(), list, rt); err != nil {
		t.Fatal(err)
	}
	ids := func(atts []*CachedAttachment, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, a := range atts {
			s = append(s, a.Network+"/"+a.ContainerID+" "+filepath.Dir(filepath.Dir(a.Path)))
		}
		return strings.Join(s, ",")
	}
	want := "net1/c9 " + own
	for name, got := range map[string]string{
		"all":          ids(r.CachedAttachments(own, "")),
		"network":      ids(r.CachedAttachments(own, "net1")),
		"container":    ids(r.CachedAttachmentsOf(own, "c9")),
		"runtime's":    ids(r.CachedAttachments("", "")),
		"runtime's of": ids(r.CachedAttachmentsOf("", "c9")),
	} {
		w := want
		if strings.HasPrefix(name, "runtime's") {
			w = ""
		}
		if got != w {
			t.Errorf("%s: %q, want %q", name, got, w)
		}
	}
	// What the listing found is what DEL with the same dir removes.
	if err := r.DelNetworkList(context.Background(), list, rt); err != nil {
		t.Fatal(err)
	}
	if got := ids(r.CachedAttachmentsOf(own, "c9")); got != "" {
		t.Errorf("after DEL: %q", got)
	}
}
