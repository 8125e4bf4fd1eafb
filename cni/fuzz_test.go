package cni

import (
	"bytes"
	"testing"
)

// FuzzParseNetworkConfigList: config parsing never panics, and what it
// accepts is internally consistent.
func FuzzParseNetworkConfigList(f *testing.F) {
	for _, s := range []string{
		`{"name":"n","cniVersion":"1.0.0","plugins":[{"type":"a","capabilities":{"portMappings":true},"ipam":{"type":"host-local"}}]}`,
		`{"name":"n","cniVersions":["0.4.0","1.1.0"],"disableCheck":"true","plugins":[{"type":"a"}]}`,
		`{"name":"n","cniVersion":"0.3.1","type":"bridge"}`,
		`{"name":"n","cniVersion":"1.1.0","loadOnlyInlinedPlugins":true}`,
		`null`, ``, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, parse := range []func([]byte, string) (*NetworkConfigList, error){ParseNetworkConfigList, ParseNetworkConfig} {
			l, err := parse(data, "fuzz")
			if err != nil {
				if CodeOf(err) == 0 {
					t.Fatalf("error without a CNI code: %v", err)
				}
				continue
			}
			if !IsSupportedVersion(l.CNIVersion) || l.Name == "" {
				t.Fatalf("accepted list with version %q name %q", l.CNIVersion, l.Name)
			}
			for _, p := range l.Plugins {
				if p.Type == "" || validatePluginType(p.Type) != nil {
					t.Fatalf("accepted plugin type %q", p.Type)
				}
				if _, err := buildPluginConfig(l, p, nil, map[string]any{"portMappings": 1}, nil); err != nil {
					t.Fatalf("accepted plugin whose config cannot be built: %v", err)
				}
			}
		}
	})
}

// FuzzParseResult: decoding never panics; what decodes converts to every
// version and re-decodes to the same encoding.
func FuzzParseResult(f *testing.F) {
	f.Add([]byte(result110))
	f.Add([]byte(`{"cniVersion":"0.4.0","interfaces":[{"name":"eth0"}],"ips":[{"version":"4","interface":0,"address":"10.0.0.2/24","gateway":"10.0.0.1"}],"routes":[{"dst":"0.0.0.0/0"}]}`))
	f.Add([]byte(`{"cniVersion":"0.3.0","ips":[{"version":"6","address":"fd00::2/64"}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseResult(data)
		if err != nil {
			if CodeOf(err) == 0 {
				t.Fatalf("error without a CNI code: %v", err)
			}
			return
		}
		for _, v := range SupportedVersions {
			c, err := r.ConvertTo(v)
			if err != nil {
				t.Fatalf("convert to %s: %v", v, err)
			}
			enc := c.Bytes()
			back, err := ParseResult(enc)
			if err != nil {
				t.Fatalf("re-parse of %s encoding %s: %v", v, enc, err)
			}
			if !bytes.Equal(back.Bytes(), enc) {
				t.Fatalf("round trip at %s differs:\n%s\n%s", v, enc, back.Bytes())
			}
		}
	})
}

// FuzzParseArgs: CNI_ARGS parsing never panics, and formatting what it
// parsed gives a string that parses to the same pairs.
func FuzzParseArgs(f *testing.F) {
	for _, s := range []string{"", "IgnoreUnknown=1;K8S_POD_NAME=a", "A=b=c;", ";;", "=", "A"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		pairs, err := ParseArgs(s)
		if err != nil {
			if CodeOf(err) != CodeInvalidEnvironment {
				t.Fatalf("code %d", CodeOf(err))
			}
			return
		}
		out, err := FormatArgs(pairs)
		if err != nil {
			t.Fatalf("cannot format what was parsed (%q): %v", s, err)
		}
		again, err := ParseArgs(out)
		if err != nil || len(again) != len(pairs) {
			t.Fatalf("re-parse of %q: %v, %v", out, again, err)
		}
		for i := range pairs {
			if again[i] != pairs[i] {
				t.Fatalf("pair %d: %v != %v", i, again[i], pairs[i])
			}
		}
	})
}
