package kube

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/podnet/podnet/ipam"
)

func TestCIDRName(t *testing.T) {
	for in, want := range map[string]string{
		"10.244.1.64/26":            "10-244-1-64-26",
		"10.244.1.65/26":            "10-244-1-64-26", // masked
		"fd00:10::40/122":           "fd00-10--40-122",
		"fd00::/122":                "fd00---122",
		"2001:db8:1:2:3:4:5:40/122": "2001-db8-1-2-3-4-5-40-122",
	} {
		if got := CIDRName(netip.MustParsePrefix(in)); got != want {
			t.Errorf("CIDRName(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestRef(t *testing.T) {
	def := newNames("")
	set := newNames("/storetest/x/")
	if def.set != "" || len(set.set) != 10 || newNames(ipam.DefaultPrefix).set != "" {
		t.Fatalf("sets %q %q", def.set, set.set)
	}
	p := ipam.DefaultPrefix
	for _, tt := range []struct {
		n         names
		key, name string
		res       *resource
	}{
		{def, p + "ipam/pools/default", "default", pools},
		{def, p + "ipam/blocks/10.244.1.64-26", "10-244-1-64-26", blocks},
		{def, p + "ipam/blocks/fd00:10::40-122", "fd00-10--40-122", blocks},
		{def, p + "ipam/nodes/node-1.example", "node-1.example", nodes},
		{set, "/storetest/x/ipam/pools/p", set.set + ".p", pools},
		{set, "/storetest/x/ipam/blocks/10.0.0.0-26", set.set + ".10-0-0-0-26", blocks},
	} {
		r, err := tt.n.ref(tt.key)
		if err != nil || r.name != tt.name || r.res != tt.res || r.key != tt.key {
			t.Errorf("ref(%s) = %+v %v, want %s/%s", tt.key, r, err, tt.res.plural, tt.name)
		}
	}
	for _, bad := range []string{
		p + "ipam/handles/h", // not stored in Kubernetes
		p + "ipam/affinities/n/10.0.0.0-26",
		"/other/ipam/pools/p",         // another prefix
		p + "ipam/blocks/10.0.0.1-26", // not masked
		p + "ipam/blocks/10.0.0.0/26", // not a key segment
		p + "ipam/blocks/garbage",
		p + "ipam/pools/Upper", // not an object name
		p + "ipam/pools/",
		p + "ipam/nodes/a_b",
	} {
		if r, err := def.ref(bad); err == nil {
			t.Errorf("ref(%q) = %+v, want an error", bad, r)
		}
	}
}

func TestKeyOf(t *testing.T) {
	def, set := newNames(""), newNames("/t/")
	spec := []byte(`{"cidr":"10.244.1.64/26","owners":[]}`)
	if k, err := def.keyOf(blocks, "10-244-1-64-26", spec); err != nil || k != ipam.DefaultPrefix+"ipam/blocks/10.244.1.64-26" {
		t.Errorf("keyOf block = %q %v", k, err)
	}
	if k, err := set.keyOf(blocks, set.set+".10-244-1-64-26", spec); err != nil || k != "/t/ipam/blocks/10.244.1.64-26" {
		t.Errorf("keyOf set block = %q %v", k, err)
	}
	if _, err := def.keyOf(blocks, "10-244-1-0-26", spec); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("misnamed block: %v", err)
	}
	if _, err := def.keyOf(blocks, "x", []byte(`{}`)); err == nil {
		t.Error("block without cidr accepted")
	}
	if _, err := set.keyOf(pools, "default", []byte(`{}`)); err == nil {
		t.Error("an object outside the set accepted")
	}
	if k, err := set.keyOf(nodes, set.set+".n1", []byte(`{}`)); err != nil || k != "/t/ipam/nodes/n1" {
		t.Errorf("keyOf node = %q %v", k, err)
	}
}

func TestLabels(t *testing.T) {
	def, set := newNames(""), newNames("/t/")
	blk := func(n names) ref { r, _ := n.ref(n.prefix + "ipam/blocks/10.0.0.0-26"); return r }
	for _, tt := range []struct {
		n     names
		r     ref
		value string
		want  map[string]string
	}{
		{def, blk(def), `{"cidr":"10.0.0.0/26","affinity":"host:node-1"}`, map[string]string{LabelNode: "node-1"}},
		{def, blk(def), `{"cidr":"10.0.0.0/26"}`, map[string]string{}},
		{set, blk(set), `{"cidr":"10.0.0.0/26","affinity":"host:n"}`, map[string]string{LabelNode: "n", LabelSet: set.set}},
		// A node name too long for a label value: no node label.
		{def, blk(def), `{"cidr":"10.0.0.0/26","affinity":"host:` + strings.Repeat("a", 64) + `"}`, map[string]string{}},
	} {
		got, err := tt.n.labels(tt.r, []byte(tt.value))
		if err != nil || len(got) != len(tt.want) {
			t.Errorf("labels(%s) = %v %v, want %v", tt.value, got, err, tt.want)
			continue
		}
		for k, v := range tt.want {
			if got[k] != v {
				t.Errorf("labels(%s)[%s] = %q, want %q", tt.value, k, got[k], v)
			}
		}
	}
	pool, _ := def.ref(ipam.DefaultPrefix + "ipam/pools/p1")
	node, _ := def.ref(ipam.DefaultPrefix + "ipam/nodes/n1")
	for _, bad := range []struct {
		r     ref
		value string
	}{
		{blk(def), `{"cidr":"10.0.1.0/26"}`}, // another block's value
		{blk(def), `{}`},
		{blk(def), `[1]`},
		{pool, `{"name":"p2"}`},
		{node, `{"node":"n2"}`},
	} {
		if _, err := def.labels(bad.r, []byte(bad.value)); err == nil {
			t.Errorf("labels(%s, %s) accepted", bad.r, bad.value)
		}
	}
	if sel := def.selector(); sel != "!podnet.io/ipam-set" {
		t.Errorf("default selector %q", sel)
	}
	if sel := set.selector(); sel != "podnet.io/ipam-set="+set.set {
		t.Errorf("set selector %q", sel)
	}
}

func TestErrorFor(t *testing.T) {
	ctx := t.Context()
	s := &Store{t: &miniTransport{conn: &conn{}}, creds: "kubeconfig kc.json"}
	for code, want := range map[int]error{
		409: ipam.ErrConflict, 404: ipam.ErrNotFound, 401: ipam.ErrDenied, 403: ipam.ErrDenied, 429: ipam.ErrUnavailable,
		500: ipam.ErrUnavailable, 503: ipam.ErrUnavailable, 504: ipam.ErrUnavailable,
	} {
		if err := s.errorFor(ctx, apiError("PUT x", code, nil)); !errors.Is(err, want) {
			t.Errorf("%d: %v, want %v", code, err, want)
		}
	}
	body := []byte(`{"kind":"Status","status":"Failure","message":"IPAMBlock.podnet.io \"x\" is invalid: spec.cidr: Invalid value: \"string\": cidr must be a CIDR","reason":"Invalid","code":422}`)
	err := s.errorFor(ctx, apiError("PUT ipamblocks/x", 422, body))
	var ae *APIError
	if !errors.As(err, &ae) || ae.Code != 422 || ae.Reason != "Invalid" || !strings.Contains(err.Error(), "cidr must be a CIDR") {
		t.Errorf("422: %v", err)
	}
	for _, sentinel := range []error{ipam.ErrConflict, ipam.ErrNotFound, ipam.ErrUnavailable, ipam.ErrDenied} {
		if errors.Is(err, sentinel) {
			t.Errorf("422 matches %v", sentinel)
		}
	}
	if err := s.errorFor(ctx, apiError("GET x", 403, []byte("forbidden plain"))); !strings.Contains(err.Error(), "forbidden plain") {
		t.Errorf("403: %v", err)
	}
	for op, verb := range map[string]string{"GET ipamblocks/b": "get podnet.io ipamblocks", "GET ippools": "list podnet.io ippools",
		"POST ipamnodes/n": "create podnet.io ipamnodes", "PUT ipamblocks/b": "update podnet.io ipamblocks", "DELETE ipamnodes/n": "delete podnet.io ipamnodes"} {
		if got := apiError(op, 403, nil).verb(); got != verb {
			t.Errorf("verb of %s = %q, want %q", op, got, verb)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	for in, want := range map[string]int{"1": 1, " 3 ": 3, "": 1, "x": 1, "-2": 1, "0": 0} {
		if got := parseRetryAfter(in); int(got.Seconds()) != want {
			t.Errorf("parseRetryAfter(%q) = %s, want %ds", in, got, want)
		}
	}
}

func TestParseSpec(t *testing.T) {
	if p, ok := ParseSpec("kubernetes:/etc/cni/net.d/podnet-kubeconfig"); !ok || p != "/etc/cni/net.d/podnet-kubeconfig" {
		t.Errorf("%q %v", p, ok)
	}
	for _, bad := range []string{"kubernetes:", "bolt:/x", "etcd://x"} {
		if _, ok := ParseSpec(bad); ok {
			t.Errorf("%q accepted", bad)
		}
	}
}
