package e2eetcd

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
)

func TestYAMLLiteral(t *testing.T) {
	tests := []struct {
		name, doc, want, err string
	}{
		{name: "nested", doc: "data:\n  a: \"x\"\n  k: |\n    {\n      \"b\": [\n\n        1\n      ]\n    }\n\n  c: y\n", want: "{\n  \"b\": [\n\n    1\n  ]\n}\n"},
		{name: "last key", doc: "data:\n  k: |\n    one\n    two\n", want: "one\ntwo\n"},
		{name: "trailing blank lines clipped", doc: "k: |\n  one\n\n\n", want: "one\n"},
		{name: "ends at a comment less indented", doc: "d:\n  k: |\n    one\n# note\n", want: "one\n"},
		{name: "missing", doc: "data:\n  other: |\n    x\n", err: "no key k"},
		{name: "not a literal block", doc: "k: \"x\"\n", err: "not a plain literal block"},
		{name: "chomping indicator", doc: "k: |-\n  x\n", err: "not a plain literal block"},
		{name: "empty", doc: "k: |\nnext: 1\n", err: "empty block"},
	}
	for _, tt := range tests {
		got, err := yamlLiteral([]byte(tt.doc), "k")
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: error %v, want one containing %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: got %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
}

// The edit adds the IPv6 pool to both lists and changes nothing else.
func TestWithIPv6Pool(t *testing.T) {
	conf := shippedConflist(t, "etcd://198.18.0.1:2379")
	before, err := parseNetwork(conf)
	if err != nil {
		t.Fatal(err)
	}
	pool6 := netip.MustParsePrefix(PodPool6)
	edited, err := withIPv6Pool(conf, pool6)
	if err != nil {
		t.Fatal(err)
	}
	after, err := parseNetwork(edited)
	if err != nil {
		t.Fatal(err)
	}
	if after.pools["default6"] != pool6 || len(after.pools) != len(before.pools)+1 ||
		len(after.exclude) != len(before.exclude)+1 || after.exclude[len(after.exclude)-1] != pool6 {
		t.Fatalf("after the dual-stack edit: %+v, before %+v", after, before)
	}
	// Everything else is as shipped.
	var a, b map[string]any
	if err := json.Unmarshal(conf, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(edited, &b); err != nil {
		t.Fatal(err)
	}
	bp := b["plugins"].([]any)[0].(map[string]any)
	bi := bp["ipam"].(map[string]any)
	bi["pools"] = bi["pools"].([]any)[:len(before.pools)]
	bp["masqExclude"] = bp["masqExclude"].([]any)[:len(before.exclude)]
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if !bytes.Equal(ja, jb) {
		t.Fatalf("the edit changed more than the two lists:\n%s\n%s", ja, jb)
	}
}
