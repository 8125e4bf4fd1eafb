package manifesttest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/install"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"

	"github.com/podnet/podnet/ipam"
)

// crdDir holds the custom resources of the block IPAM on the Kubernetes
// API (docs/design/kubernetes-ipam.md section 1.2).
const crdDir = "../crds"

// etcdRequestLimit is etcd's default maximum request size, 1.5 MiB: no
// object can be bigger.
const etcdRequestLimit = 3 << 19

// crdFiles are the CRDs, by plural.
var crdFiles = map[string]string{
	"ippools":    "podnet.io_ippools.yaml",
	"ipamblocks": "podnet.io_ipamblocks.yaml",
	"ipamnodes":  "podnet.io_ipamnodes.yaml",
}

// loadCRD decodes a CRD strictly, as the API server does with strict
// field validation, and converts it to the internal version the API
// server validates, defaults applied.
func loadCRD(t *testing.T, plural string) (*apiextensionsv1.CustomResourceDefinition, *apiextensions.CustomResourceDefinition) {
	t.Helper()
	scheme := runtime.NewScheme()
	install.Install(scheme)
	dec := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
	path := filepath.Join(crdDir, crdFiles[plural])
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	obj, _, err := dec.Decode(data, nil, nil)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	v1, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
	if !ok {
		t.Fatalf("%s: a %T, want an apiextensions.k8s.io/v1 CustomResourceDefinition", path, obj)
	}
	scheme.Default(v1)
	internal := &apiextensions.CustomResourceDefinition{}
	if err := scheme.Convert(v1, internal, nil); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v1, internal
}

// TestCRDs: each CRD is what the API server accepts (structural schema,
// CEL rules that compile within the cost budget) and what the store
// expects: podnet.io/v1, cluster-scoped, no status subresource, spec
// required, printer columns.
func TestCRDs(t *testing.T) {
	for plural, file := range crdFiles {
		t.Run(plural, func(t *testing.T) {
			v1, internal := loadCRD(t, plural)
			if errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), internal); len(errs) > 0 {
				t.Fatalf("%s: the API server would refuse it: %v", file, errs.ToAggregate())
			}
			s := v1.Spec
			if v1.Name != plural+".podnet.io" || s.Group != "podnet.io" || s.Names.Plural != plural ||
				s.Scope != apiextensionsv1.ClusterScoped || len(s.Versions) != 1 {
				t.Fatalf("%s: name %s, group %s, plural %s, scope %s, %d versions; want %s.podnet.io, cluster-scoped, v1 alone",
					file, v1.Name, s.Group, s.Names.Plural, s.Scope, len(s.Versions), plural)
			}
			ver := s.Versions[0]
			if ver.Name != "v1" || !ver.Served || !ver.Storage {
				t.Errorf("%s: version %s served=%v storage=%v", file, ver.Name, ver.Served, ver.Storage)
			}
			if ver.Subresources != nil {
				t.Errorf("%s: subresources %+v: a status subresource would split a change into two writes", file, ver.Subresources)
			}
			root := ver.Schema.OpenAPIV3Schema
			if !contains(root.Required, "spec") || root.Properties["spec"].XPreserveUnknownFields == nil {
				t.Errorf("%s: spec must be required and keep unknown fields", file)
			}
			var cols []string
			for _, c := range ver.AdditionalPrinterColumns {
				cols = append(cols, c.Name)
			}
			if want := printerColumns[plural]; strings.Join(cols, ",") != want {
				t.Errorf("%s: printer columns %v, want %s", file, cols, want)
			}
		})
	}
}

var printerColumns = map[string]string{
	"ippools":    "CIDR,Block-Size,Disabled,Age",
	"ipamblocks": "CIDR,Node,Age",
	"ipamnodes":  "Node,Age",
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// validator validates objects against a CRD as the API server does on a
// create: the OpenAPI schema, then the CEL rules.
type validator struct {
	schema validation.SchemaValidator
	cel    *cel.Validator
	s      *structuralschema.Structural
}

func newValidator(t *testing.T, plural string) *validator {
	t.Helper()
	v1, _ := loadCRD(t, plural)
	// The internal version hoists a schema all versions share to
	// spec.validation; convert the version's own.
	props := &apiextensions.JSONSchemaProps{}
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v1.Spec.Versions[0].Schema.OpenAPIV3Schema, props, nil); err != nil {
		t.Fatal(err)
	}
	sv, _, err := validation.NewSchemaValidator(props)
	if err != nil {
		t.Fatal(err)
	}
	s, err := structuralschema.NewStructural(props)
	if err != nil {
		t.Fatal(err)
	}
	return &validator{schema: sv, s: s, cel: cel.NewValidator(s, true, celconfig.PerCallLimit)}
}

// validate returns what the API server would refuse in obj, JSON.
func (v *validator) validate(t *testing.T, obj []byte) field.ErrorList {
	t.Helper()
	// As the API server decodes: whole numbers as int64.
	var u map[string]any
	if err := utiljson.Unmarshal(obj, &u); err != nil {
		t.Fatal(err)
	}
	errs := validation.ValidateCustomResource(nil, u, v.schema)
	celErrs, _ := v.cel.Validate(context.Background(), nil, v.s, u, nil, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}

// resource wraps spec as an object of kind.
func resource(kind, name string, spec any) []byte {
	b, err := json.Marshal(map[string]any{"apiVersion": "podnet.io/v1", "kind": kind,
		"metadata": map[string]any{"name": name}, "spec": spec})
	if err != nil {
		panic(err)
	}
	return b
}

// maxBlock is the largest block the allocator can write: 10 host bits
// (1,024 addresses), every address its own owner, every attribute at
// Kubernetes' name limits.
func maxBlock(t *testing.T) map[string]any {
	cidr := netip.MustParsePrefix("fd00:ffff:ffff:ffff:ffff:ffff:ffff:fc00/118")
	b := ipam.NewBlock(cidr, ipam.HostAffinity(strings.Repeat("n", 253)))
	const n = 1024
	if len(b.Owners) != n {
		t.Fatalf("%d ordinals", len(b.Owners))
	}
	long := func(c string, l int) string { return strings.Repeat(c, l) }
	for i := range n {
		b.Owners[i] = i + 1
		b.Attributes = append(b.Attributes, ipam.Attributes{
			Handle: long("w", 64) + "." + fmt.Sprintf("%064x", i),
			Node:   long("n", 253),
			Extra: map[string]string{
				"endpoint": long("n", 253) + "/" + long("s", 63) + "/" + long("p", 253) + "/" + long("i", 15),
				"created":  time.Date(2026, 12, 31, 23, 59, 59, 999999999, time.FixedZone("", 3600)).Format(time.RFC3339Nano),
			},
		})
	}
	b.Sequence = 1<<63 - 1
	b.EmptySince = time.Now()
	data, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	var spec map[string]any
	if err := utiljson.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	spec["affinitySince"] = time.Now().Format(time.RFC3339Nano)
	// Both lists full: more than a real block, which frees what it does
	// not own.
	free := make([]int, n)
	for i := range free {
		free[i] = n - 1 - i
	}
	spec["free"] = free
	return spec
}

// TestMaxBlockFits: the largest block validates and stays under etcd's
// request limit, with room for the metadata the API server adds.
func TestMaxBlockFits(t *testing.T) {
	v := newValidator(t, "ipamblocks")
	obj := resource("IPAMBlock", "fd00-ffff-ffff-ffff-ffff-ffff-ffff-fc00-118", maxBlock(t))
	if errs := v.validate(t, obj); len(errs) > 0 {
		t.Fatalf("the largest block is refused: %v", errs.ToAggregate())
	}
	t.Logf("largest block: %d bytes of JSON (limit %d)", len(obj), etcdRequestLimit)
	if len(obj) > etcdRequestLimit-64<<10 {
		t.Errorf("the largest block is %d bytes: over etcd's %d less 64 KiB for metadata", len(obj), etcdRequestLimit)
	}
}

// TestCRDValidationRefuses: what the schemas and CEL rules refuse, and
// what they let through.
func TestCRDValidationRefuses(t *testing.T) {
	block := func(mod func(map[string]any)) []byte {
		spec := map[string]any{"cidr": "10.244.1.64/26", "affinity": "host:n1", "owners": make([]int, 64), "free": []int{0, 1}, "sequence": 3,
			"attributes":    []any{map[string]any{"handle": "net.c1", "node": "n1", "extra": map[string]any{"endpoint": "n1/default/p/eth0"}}},
			"affinitySince": "2026-01-02T03:04:05.123456789Z", "futureField": 1}
		if mod != nil {
			mod(spec)
		}
		return resource("IPAMBlock", "10-244-1-64-26", spec)
	}
	pool := func(cidr string, bs int) []byte {
		return resource("IPPool", "p", map[string]any{"name": "p", "cidr": cidr, "blockSize": bs})
	}
	node := func(state, cidr string) []byte {
		return resource("IPAMNode", "n1", map[string]any{"node": "n1",
			"blocks":   []any{map[string]any{"cidr": cidr, "state": state, "since": "0001-01-01T00:00:00Z"}},
			"borrowed": []any{map[string]any{"cidr": "10.244.2.0/26", "ips": []string{"10.244.2.7"}}}})
	}
	for _, tt := range []struct {
		name, plural string
		obj          []byte
		ok           bool
	}{
		{"block", "ipamblocks", block(nil), true},
		{"block bad cidr", "ipamblocks", block(func(s map[string]any) { s["cidr"] = "10.244.1.64/33" }), false},
		{"block no cidr", "ipamblocks", block(func(s map[string]any) { delete(s, "cidr") }), false},
		{"block 1025 owners", "ipamblocks", block(func(s map[string]any) { s["owners"] = make([]int, 1025) }), false},
		{"block negative owner", "ipamblocks", block(func(s map[string]any) { s["owners"] = []int{-1} }), false},
		{"block bad time", "ipamblocks", block(func(s map[string]any) { s["emptySince"] = "yesterday" }), false},
		{"block attribute without handle", "ipamblocks", block(func(s map[string]any) { s["attributes"] = []any{map[string]any{"node": "n"}} }), false},
		{"pool", "ippools", pool("10.244.0.0/16", 26), true},
		{"pool default size", "ippools", pool("fd00:10::/64", 0), true},
		{"pool bad cidr", "ippools", pool("10.244.0.0", 26), false},
		{"pool 12 host bits", "ippools", pool("10.244.0.0/16", 20), false},
		{"pool block bigger than pool", "ippools", pool("10.244.0.0/24", 22), false},
		{"pool v4 block size 33", "ippools", pool("10.244.0.0/16", 33), false},
		{"pool v6 /122", "ippools", pool("fd00:10::/64", 122), true},
		{"node", "ipamnodes", node("confirmed", "10.244.1.64/26"), true},
		{"node bad state", "ipamnodes", node("claimed", "10.244.1.64/26"), false},
		{"node bad cidr", "ipamnodes", node("pending", "10.244.1.64"), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			errs := newValidator(t, tt.plural).validate(t, tt.obj)
			if tt.ok && len(errs) > 0 {
				t.Errorf("refused: %v", errs.ToAggregate())
			}
			if !tt.ok && len(errs) == 0 {
				t.Errorf("accepted %s", tt.obj)
			}
		})
	}
}

// TestIPPoolValidationIsTheAllocators: the IPPool CRD refuses exactly the
// pools the allocator refuses (ipam.Pool.Normalize: name, cidr,
// blockSize, nodeSelector), so that kubectl cannot write a pool every
// allocator would skip, and cannot be refused one the allocator takes.
// Node selectors are compared over every string of up to 4 characters
// from an alphabet of the characters the grammar turns on, and a list of
// real ones.
func TestIPPoolValidationIsTheAllocators(t *testing.T) {
	v := newValidator(t, "ippools")
	check := func(spec map[string]any) {
		t.Helper()
		data, err := json.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		var p ipam.Pool
		allocErr := json.Unmarshal(data, &p)
		if allocErr == nil {
			_, allocErr = p.Normalize()
		}
		crdErrs := v.validate(t, resource("IPPool", "p", spec))
		if (allocErr == nil) != (len(crdErrs) == 0) {
			t.Errorf("pool %s: the allocator says %v, the CRD %v", data, allocErr, crdErrs.ToAggregate())
		}
	}
	for _, c := range []struct {
		cidr string
		bs   []int
	}{
		{"10.244.0.0/16", []int{-1, 0, 15, 16, 20, 21, 22, 26, 32, 33}},
		{"10.244.1.0/16", []int{0, 26}}, // masked by the allocator
		{"10.0.0.0/30", []int{0, 22, 29, 30, 31, 32}},
		{"fd00:10::/64", []int{0, 64, 117, 118, 122, 128, 129}},
		{"fd00:10::/120", []int{0, 120, 128}},
		{"0.0.0.0/0", []int{0, 22, 26}},
		{"::/0", []int{0, 118, 122}},
		{"::ffff:10.0.0.0/104", []int{0, 122}}, // IPv4-mapped
		{"10.244.0.0", []int{26}},
		{"10.244.0.0/33", []int{26}},
		{"010.244.0.0/16", []int{26}},
		{"10.244.0.0/016", []int{26}},
		{" 10.244.0.0/16", []int{26}},
		{"fe80::%eth0/64", []int{122}},
		{"", []int{26}},
	} {
		for _, bs := range c.bs {
			check(map[string]any{"name": "p", "cidr": c.cidr, "blockSize": bs})
		}
	}
	for _, name := range []string{"", "p", "a/b", "/", "default-ipv4"} {
		check(map[string]any{"name": name, "cidr": "10.244.0.0/16"})
	}
	check(map[string]any{"cidr": "10.244.0.0/16"})
	check(map[string]any{"name": "p"})

	selectors := []string{
		"all()", " all() ", "all(),zone=a", "kubernetes.io/os=linux", "node-role.kubernetes.io/worker",
		"zone==a, rack!=r1 ,!gpu,ssd", "zone in (a,b)", "a=b=c", "a!=b=c", "!a=b", "a,,b", "a,", ",a",
		"zone=\u00a0a", "zone\u2028=a", "a\u3000b=c", "a\tb=c",
	}
	alphabet := []string{"a", " ", "\t", "!", "=", ",", "\u00a0", "(", "/"}
	var gen func(s string, n int)
	gen = func(s string, n int) {
		selectors = append(selectors, s)
		if n == 0 {
			return
		}
		for _, c := range alphabet {
			gen(s+c, n-1)
		}
	}
	gen("", 4)
	for _, sel := range selectors {
		check(map[string]any{"name": "p", "cidr": "10.244.0.0/16", "nodeSelector": sel})
	}
}
