package cni

import (
	"encoding/json"
	"strings"
	"testing"
)

const result110 = `{
  "cniVersion": "1.1.0",
  "interfaces": [
    {"name": "eth0", "mac": "0a:58:0a:f4:00:05", "mtu": 1450, "sandbox": "/run/netns/p1", "socketPath": "/s", "pciID": "0000:00:1f.6"}
  ],
  "ips": [
    {"interface": 0, "address": "10.244.0.5/24", "gateway": "10.244.0.1"},
    {"interface": 0, "address": "fd00::5/64"}
  ],
  "routes": [
    {"dst": "0.0.0.0/0", "gw": "10.244.0.1", "mtu": 1400, "advmss": 1360, "priority": 10, "table": 100, "scope": 0}
  ],
  "dns": {"nameservers": ["10.96.0.10"], "search": ["svc.cluster.local"]}
}`

func TestResultConversions(t *testing.T) {
	r, err := ParseResult([]byte(result110))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		version string
		want    []string // substrings the encoding must have
		wantNot []string // and must not have
	}{
		{"1.1.0", []string{`"mtu":1450`, `"socketPath":"/s"`, `"advmss":1360`, `"table":100`, `"scope":0`}, []string{`"version"`}},
		{"1.0.0", []string{`"address":"10.244.0.5/24"`, `"gateway":"10.244.0.1"`}, []string{`"version"`, `"mtu"`, `"socketPath"`, `"pciID"`, `"advmss"`, `"table"`, `"scope"`}},
		{"0.4.0", []string{`"version":"4"`, `"version":"6"`, `"interface":0`}, []string{`"mtu"`}},
		{"0.3.1", []string{`"version":"4"`}, nil},
		{"0.3.0", []string{`"version":"4"`, `"dns":{"nameservers":["10.96.0.10"]`}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.version, func(t *testing.T) {
			c, err := r.ConvertTo(tc.version)
			if err != nil {
				t.Fatal(err)
			}
			b := string(c.Bytes())
			for _, w := range tc.want {
				if !strings.Contains(b, w) {
					t.Errorf("encoding lacks %s:\n%s", w, b)
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(b, w) {
					t.Errorf("encoding has %s:\n%s", w, b)
				}
			}
			// Round trip: what we write, we read back identically.
			back, err := ParseResult(c.Bytes())
			if err != nil {
				t.Fatalf("re-parse: %v", err)
			}
			if string(back.Bytes()) != b {
				t.Errorf("round trip differs:\n%s\n%s", b, back.Bytes())
			}
		})
	}
	if r.Interfaces[0].Mtu != 1450 {
		t.Error("ConvertTo modified the original")
	}
}

func TestParseResultRejects(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"empty", "", "empty"},
		{"null", "null", "not a JSON object"},
		{"garbage", "hello", "not a JSON object"},
		{"array", "[]", "not a JSON object"},
		{"truncated", `{"cniVersion":"1.0.0"`, "not valid JSON"},
		{"no version", `{"ips":[]}`, "no cniVersion"},
		{"unknown version", `{"cniVersion":"9.9.9"}`, "not supported"},
		{"bad version", `{"cniVersion":"one"}`, "not a valid version"},
		{"bad address", `{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.300/24"}]}`, "cannot decode"},
		{"no address", `{"cniVersion":"1.0.0","ips":[{"gateway":"10.0.0.1"}]}`, "no address"},
		{"null ip", `{"cniVersion":"1.0.0","ips":[null]}`, "ips[0] is null"},
		{"index out of range", `{"cniVersion":"1.0.0","interfaces":[{"name":"a"}],"ips":[{"interface":1,"address":"10.0.0.1/24"}]}`, "out of range"},
		{"negative index", `{"cniVersion":"1.0.0","ips":[{"interface":-1,"address":"10.0.0.1/24"}]}`, "out of range"},
		{"family mismatch", `{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.1/24","gateway":"fe80::1"}]}`, "family"},
		{"v0 version mismatch", `{"cniVersion":"0.4.0","ips":[{"version":"6","address":"10.0.0.1/24"}]}`, "does not match"},
		{"route without dst", `{"cniVersion":"1.0.0","routes":[{"gw":"10.0.0.1"}]}`, "no dst"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseResult([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want error containing %q", err, tc.want)
			}
			if c := CodeOf(err); c != CodeDecodingFailure && c != CodeIncompatibleVersion {
				t.Errorf("code %d, want 6 or 1", c)
			}
		})
	}
}

func TestResultJSONIsSpecShaped(t *testing.T) {
	r := &Result{CNIVersion: "1.0.0", IPs: []*IPConfig{{Address: mustPrefix(t, "10.0.0.2/32")}}}
	var m map[string]any
	if err := json.Unmarshal(r.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["dns"]; ok {
		t.Error("empty dns must be omitted")
	}
	ip := m["ips"].([]any)[0].(map[string]any)
	if _, ok := ip["gateway"]; ok {
		t.Error("zero gateway must be omitted")
	}
}

func TestCompareVersions(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"0.3.0", "0.3.1", -1}, {"1.0.0", "0.4.0", 1}, {"1.1.0", "1.1.0", 0}, {"0.10.0", "0.9.0", 1}, {"0.1", "0.1.0", 0},
	}
	for _, tc := range tests {
		got, err := CompareVersions(tc.a, tc.b)
		if err != nil || got != tc.want {
			t.Errorf("CompareVersions(%s,%s) = %d, %v; want %d", tc.a, tc.b, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "1", "1.x.0", "1.0.0.0", "01.0.0", "-1.0.0"} {
		if _, err := CompareVersions(bad, "1.0.0"); err == nil {
			t.Errorf("CompareVersions(%q) accepted", bad)
		}
	}
}
