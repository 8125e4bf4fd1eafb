package cni

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestParseNetworkConfigListErrors(t *testing.T) {
	tests := []struct {
		name, in string
		code     Code
		want     string
	}{
		{"empty", ``, CodeDecodingFailure, "empty configuration"},
		{"not object", `[1]`, CodeDecodingFailure, "cannot decode"},
		{"null", `null`, CodeDecodingFailure, "not a JSON object"},
		{"no name", `{"cniVersion":"1.0.0","plugins":[{"type":"x"}]}`, CodeInvalidNetworkConfig, "f.conflist: name: missing"},
		{"name type", `{"name":5,"cniVersion":"1.0.0","plugins":[{"type":"x"}]}`, CodeInvalidNetworkConfig, "name: must be a string"},
		{"bad name", `{"name":"-x","cniVersion":"1.0.0","plugins":[{"type":"x"}]}`, CodeInvalidNetworkConfig, "not a valid network name"},
		{"no version", `{"name":"n","plugins":[{"type":"x"}]}`, CodeInvalidNetworkConfig, "cniVersion: missing"},
		{"bad version", `{"name":"n","cniVersion":"x.y","plugins":[{"type":"x"}]}`, CodeIncompatibleVersion, "cniVersion"},
		{"unsupported version", `{"name":"n","cniVersion":"0.2.0","plugins":[{"type":"x"}]}`, CodeIncompatibleVersion, "not supported"},
		{"bad cniVersions entry", `{"name":"n","cniVersions":["1.0.0","banana"],"plugins":[{"type":"x"}]}`, CodeIncompatibleVersion, "cniVersions[1]"},
		{"no supported cniVersions", `{"name":"n","cniVersions":["2.0.0"],"plugins":[{"type":"x"}]}`, CodeIncompatibleVersion, "none of the versions"},
		{"plugins not list", `{"name":"n","cniVersion":"1.0.0","plugins":{}}`, CodeInvalidNetworkConfig, "plugins: must be a list"},
		{"plugins empty", `{"name":"n","cniVersion":"1.0.0","plugins":[]}`, CodeInvalidNetworkConfig, "plugins: list is empty"},
		{"plugin no type", `{"name":"n","cniVersion":"1.0.0","plugins":[{"type":"a"},{}]}`, CodeInvalidNetworkConfig, "plugins[1]: type: missing"},
		{"plugin type path", `{"name":"n","cniVersion":"1.0.0","plugins":[{"type":"../../bin/sh"}]}`, CodeInvalidNetworkConfig, "path separator"},
		{"ipam type path", `{"name":"n","cniVersion":"1.0.0","plugins":[{"type":"a","ipam":{"type":"/x"}}]}`, CodeInvalidNetworkConfig, "ipam.type"},
		{"bad capabilities", `{"name":"n","cniVersion":"1.0.0","plugins":[{"type":"a","capabilities":{"portMappings":"yes"}}]}`, CodeInvalidNetworkConfig, "capabilities"},
		{"bad bool", `{"name":"n","cniVersion":"1.0.0","disableCheck":"maybe","plugins":[{"type":"a"}]}`, CodeInvalidNetworkConfig, "disableCheck: must be a boolean"},
		{"inlined only without plugins", `{"name":"n","cniVersion":"1.0.0","loadOnlyInlinedPlugins":true}`, CodeInvalidNetworkConfig, "loadOnlyInlinedPlugins"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseNetworkConfigList([]byte(tc.in), "f.conflist")
			if err == nil {
				t.Fatal("accepted")
			}
			if CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got code %d %q; want code %d containing %q", CodeOf(err), err, tc.code, tc.want)
			}
		})
	}
}

func TestParseNetworkConfigList(t *testing.T) {
	l, err := ParseNetworkConfigList([]byte(`{
		"name": "podnet", "cniVersion": "0.4.0", "cniVersions": ["1.0.0", "1.1.0", "7.0.0"],
		"disableCheck": "true", "disableGC": true,
		"plugins": [
			{"type": "podnet", "ipam": {"type": "podnet-ipam"}},
			{"type": "podnet-portmap", "capabilities": {"portMappings": true}}
		]}`), "x")
	if err != nil {
		t.Fatal(err)
	}
	if l.CNIVersion != "1.1.0" {
		t.Errorf("version %s, want the highest supported 1.1.0", l.CNIVersion)
	}
	if !l.DisableCheck || !l.DisableGC {
		t.Error("flags not read")
	}
	if len(l.Plugins) != 2 || l.Plugins[0].IPAMType != "podnet-ipam" || !l.Plugins[1].Capabilities["portMappings"] {
		t.Errorf("plugins: %+v", l.Plugins)
	}
}

func TestLoadDir(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"10-good.conflist":    `{"name":"good","cniVersion":"1.0.0","plugins":[{"type":"a"}]}`,
		"05-broken.conflist":  `{"name":"broken",`,
		"20-single.conf":      `{"name":"single","cniVersion":"0.4.0","type":"bridge","bridge":"cbr0"}`,
		"30-dup.conflist":     `{"name":"good","cniVersion":"1.0.0","plugins":[{"type":"b"}]}`,
		"40-ext.conflist":     `{"name":"ext","cniVersion":"1.1.0","plugins":[{"type":"first"}]}`,
		"ext/10-second.conf":  `{"type":"second"}`,
		"ext/ignored.json":    `{"type":"nope"}`,
		"50-nested.conflist":  `{"name":"nested","cniVersion":"1.1.0"}`,
		"nested/a.conf":       `{"type":"only"}`,
		"60-inl.conflist":     `{"name":"inl","cniVersion":"1.1.0","loadOnlyInlinedPlugins":true,"plugins":[{"type":"x"}]}`,
		"inl/a.conf":          `{"type":"not-loaded"}`,
		"70-empty.conflist":   `{"name":"empty","cniVersion":"1.1.0"}`,
		"README.md":           `not a config`,
		"80-list-in.json":     `{"name":"jsonlist","cniVersion":"1.0.0","plugins":[{"type":"j"}]}`,
		"90-badplugin.conf":   `{"name":"bp","cniVersion":"1.0.0"}`,
		"95-badsub.conflist":  `{"name":"badsub","cniVersion":"1.0.0","plugins":[{"type":"a"}]}`,
		"badsub/zz.conf":      `{"type":5}`,
		"subdir.conf/ignored": `x`,
	})
	dc, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range dc.Networks {
		var types []string
		for _, p := range n.Plugins {
			types = append(types, p.Type)
		}
		names = append(names, n.Name+"="+strings.Join(types, ","))
	}
	want := "good=a single=bridge ext=first,second nested=only inl=x jsonlist=j"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("networks %q, want %q", got, want)
	}
	broken := map[string]string{}
	for _, b := range dc.Broken {
		broken[filepath.Base(b.Path)] = b.Error()
		if !strings.HasPrefix(b.Error(), b.Path) {
			t.Errorf("error for %s does not name the file: %v", b.Path, b.Err)
		}
	}
	for file, reason := range map[string]string{
		"05-broken.conflist": "cannot decode",
		"30-dup.conflist":    "already defined in " + filepath.Join(dir, "10-good.conflist"),
		"70-empty.conflist":  "has no plugins",
		"90-badplugin.conf":  "type: missing",
		"95-badsub.conflist": "zz.conf: type: must be a string",
	} {
		if !strings.Contains(broken[file], reason) {
			t.Errorf("%s: reason %q, want it to contain %q", file, broken[file], reason)
		}
	}
	if len(dc.Broken) != 5 {
		t.Errorf("%d broken files, want 5: %v", len(dc.Broken), broken)
	}
	if dc.Network("single").Plugins[0].Source != filepath.Join(dir, "20-single.conf") {
		t.Errorf("single-plugin source %q", dc.Network("single").Plugins[0].Source)
	}
}

func TestLoadDirMissing(t *testing.T) {
	dc, err := LoadDir(filepath.Join(t.TempDir(), "nope"))
	if err != nil || len(dc.Networks) != 0 || len(dc.Broken) != 0 {
		t.Fatalf("missing dir: %+v, %v", dc, err)
	}
}

func TestBuildPluginConfig(t *testing.T) {
	list, err := ParseNetworkConfigList([]byte(`{"name":"n","cniVersion":"1.0.0","plugins":[
		{"type":"portmap","capabilities":{"portMappings":true,"bandwidth":false},"snat":true,"runtimeConfig":{"old":1}}]}`), "x")
	if err != nil {
		t.Fatal(err)
	}
	prev := &Result{CNIVersion: "1.0.0", IPs: []*IPConfig{{Address: mustPrefix(t, "10.0.0.2/24")}}}
	caps := map[string]any{"portMappings": []map[string]any{{"hostPort": 80}}, "bandwidth": map[string]int{"x": 1}, "dns": 1}
	b, err := buildPluginConfig(list, list.Plugins[0], prev, caps, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{`"name":"n"`, `"cniVersion":"1.0.0"`, `"snat":true`, `"prevResult":{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24"}]}`, `"runtimeConfig":{"portMappings":[{"hostPort":80}]}`} {
		if !strings.Contains(s, want) {
			t.Errorf("config lacks %s:\n%s", want, s)
		}
	}
	if strings.Contains(s, `"bandwidth":{`) || strings.Contains(s, `"dns"`) {
		t.Errorf("undeclared capability leaked into config:\n%s", s)
	}
}
