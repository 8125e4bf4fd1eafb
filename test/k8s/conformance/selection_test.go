package conformance

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/podnet/podnet/test/k8s/cluster"
)

var update = flag.Bool("update", false, "rewrite docs/conformance.md's generated part")

func TestSkipRegexp(t *testing.T) {
	re := regexp.MustCompile(Default().WithoutSCTP().SkipRegexp())
	for _, k := range append(slices.Clone(Skips), SCTPSkips...) {
		// Ginkgo matches the suite's description, a space, the text.
		if !re.MatchString("Kubernetes e2e suite " + k.Name) {
			t.Errorf("--skip does not match %q", k.Name)
		}
		if re.MatchString("Kubernetes e2e suite " + k.Name + " and more") {
			t.Errorf("--skip matches a longer text than %q", k.Name)
		}
	}
	if re.MatchString("Kubernetes e2e suite [sig-network] Services should serve a basic endpoint from pods [Conformance]") {
		t.Error("--skip matches a spec it does not name")
	}
}

// The facts of v1.34.4's suite (issue 19): its [sig-network] specs, the
// [Conformance] ones, those that are not [Serial], [Disruptive],
// [Flaky] or [Feature:...] and need no cloud; and what the selection
// keeps of them, and make test's subset of it.
const (
	wantNetwork         = 244
	wantConformance     = 45
	wantNoCloud         = 176
	wantSelected        = 175
	wantSelectedConform = 45
	wantNetpol          = 48 // [Feature:NetworkPolicy], all selected
	wantMakeTest        = 16
)

// TestDryRun runs e2e.test --ginkgo.dry-run (building it first on a cold
// cache: many minutes) and proves the selection: every skipped spec
// exists and is not selected, network-safety ones above all; no selected
// spec is [Serial], [Disruptive], [Flaky] or [Feature:...]; the counts
// are the suite's; the images are named as e2e.test names them; and
// docs/conformance.md lists what the selection is.
func TestDryRun(t *testing.T) {
	bin, err := cluster.E2EBinaries(t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	all, err := DryRun(bin, Selection{LabelFilter: "sig-network"}, dir)
	if err != nil {
		t.Fatal(err)
	}
	all = selectedOf(all)
	base := selectedOf(mustDryRun(t, bin, Selection{LabelFilter: BaseLabelFilter}, dir))
	sel := Default()
	selected := selectedOf(mustDryRun(t, bin, sel, dir))

	names := map[string]bool{}
	conformance := 0
	for _, s := range all {
		names[s.Name] = true
		if s.HasLabel("Conformance") {
			conformance++
		}
	}
	selNames := map[string]bool{}
	selConformance := 0
	for _, s := range selected {
		selNames[s.Name] = true
		if s.HasLabel("Conformance") {
			selConformance++
		}
		if l := excludedBy(s); l != "" || !s.HasLabel("sig-network") {
			t.Errorf("selected %q has label %q or lacks sig-network", s.Name, l)
		}
	}
	var safety int
	for _, k := range Skips {
		if !names[k.Name] {
			t.Errorf("skip list names %q, which is no [sig-network] spec of the suite", k.Name)
		}
		if selNames[k.Name] {
			t.Errorf("skipped spec %q (%s) is selected", k.Name, k.Reason)
		}
		if k.Reason == NetworkSafety {
			safety++
		}
	}
	// The network-safety entries stay out even with the label filter
	// alone gone: the skip list is enough on its own.
	unfiltered := selectedOf(mustDryRun(t, bin, Selection{LabelFilter: "sig-network", Skips: Skips}, dir))
	for _, s := range unfiltered {
		for _, k := range Skips {
			if s.Name == k.Name {
				t.Errorf("skip list alone lets %q run", k.Name)
			}
		}
	}
	if len(unfiltered) != len(all)-len(Skips) {
		t.Errorf("skip list alone leaves %d of %d specs, want %d", len(unfiltered), len(all), len(all)-len(Skips))
	}
	noCloud := 0
	for _, s := range base {
		if !strings.Contains(s.Name, "[Provider:GCE]") && !strings.Contains(s.Name, "Type LoadBalancer") {
			noCloud++
		}
	}
	t.Logf("[sig-network]: %d specs, %d [Conformance]; label filter keeps %d (%d need no cloud); selected %d (%d [Conformance]); %d skipped by name, %d for network safety",
		len(all), conformance, len(base), noCloud, len(selected), selConformance, len(Skips), safety)
	for _, c := range []struct {
		what      string
		got, want int
	}{
		{"[sig-network] specs", len(all), wantNetwork},
		{"[sig-network] [Conformance] specs", conformance, wantConformance},
		{"not Serial, Disruptive, Flaky or Feature, no cloud", noCloud, wantNoCloud},
		{"selected", len(selected), wantSelected},
		{"selected [Conformance]", selConformance, wantSelectedConform},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d, want %d", c.what, c.got, c.want)
		}
	}

	// The NetworkPolicy specs are selected, all of them; on a kernel
	// without SCTP, WithoutSCTP leaves out exactly the SCTP ones.
	netpol := 0
	for _, s := range selected {
		if s.HasLabel(FeatureNetworkPolicy) {
			netpol++
		}
	}
	if netpol != wantNetpol {
		t.Errorf("selected [%s] specs: %d, want %d", FeatureNetworkPolicy, netpol, wantNetpol)
	}
	noSCTP := map[string]bool{}
	for _, s := range selectedOf(mustDryRun(t, bin, sel.WithoutSCTP(), dir)) {
		noSCTP[s.Name] = true
	}
	for _, k := range SCTPSkips {
		if !selNames[k.Name] {
			t.Errorf("SCTP skip %q is not a selected spec", k.Name)
		}
		if noSCTP[k.Name] {
			t.Errorf("WithoutSCTP selects %q", k.Name)
		}
	}
	if len(noSCTP) != len(selected)-len(SCTPSkips) {
		t.Errorf("WithoutSCTP selects %d specs, want %d", len(noSCTP), len(selected)-len(SCTPSkips))
	}

	// make test's subset: each of its specs is one of the selection's,
	// and the focus matches as many as it was written for (a renamed
	// spec would drop out silently otherwise).
	focused := Default()
	focused.Focus = MakeTestFocus
	subset := selectedOf(mustDryRun(t, bin, focused, dir))
	for _, s := range subset {
		if !selNames[s.Name] {
			t.Errorf("make test's subset runs %q, which the selection does not", s.Name)
		}
	}
	t.Logf("make test's subset: %d specs", len(subset))
	if len(subset) != wantMakeTest {
		t.Errorf("make test's subset: %d specs, want %d", len(subset), wantMakeTest)
	}

	images, err := ListImages(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range Images {
		if !slices.Contains(images, img) {
			t.Errorf("image %s is not among e2e.test --list-images", img)
		}
	}

	checkDoc(t, Doc(sel, all, selected))
}

// selectedOf keeps the specs a dry run would run.
func selectedOf(specs []Spec) []Spec {
	var out []Spec
	for _, s := range specs {
		if s.State == "passed" {
			out = append(out, s)
		}
	}
	return out
}

func mustDryRun(t *testing.T, bin string, sel Selection, dir string) []Spec {
	t.Helper()
	specs, err := DryRun(bin, sel, dir)
	if err != nil {
		t.Fatal(err)
	}
	return specs
}

// checkDoc compares docs/conformance.md's generated part with gen, or
// writes gen there with -update.
func checkDoc(t *testing.T, gen string) {
	t.Helper()
	mod, err := cluster.ModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(mod, "../../docs/conformance.md")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	i, j := strings.Index(doc, DocBegin), strings.Index(doc, DocEnd)
	if i < 0 || j < i {
		t.Fatalf("%s: no generated part between %q and %q", path, DocBegin, DocEnd)
	}
	cur := doc[i+len(DocBegin) : j]
	want := "\n" + gen
	if cur == want {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(doc[:i+len(DocBegin)]+want+doc[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote %s", path)
		return
	}
	t.Errorf("%s is not what the suite and the selection say: go test ./conformance -run TestDryRun -update", path)
}
