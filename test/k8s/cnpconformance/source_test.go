package cnpconformance

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// suiteSource is what the suite's tests (conformance/tests at the pinned
// release) do, read from their source.
type suiteSource struct {
	tests []sourceTest
}

type sourceTest struct {
	name         string // ShortName
	experimental bool   // a feature other than the standard one
	subtests     []sourceSubtest
	// direct: probes outside any subtest.
	direct []probe
}

type sourceSubtest struct {
	name   string
	probes []probe
}

// probe is one kubernetes.PokeServer call: the protocol (a literal) and
// the target host as written.
type probe struct {
	protocol, target string
}

func (t sourceTest) probesSCTP() (all, any bool) {
	all = len(t.subtests) > 0
	for _, s := range t.subtests {
		if s.probesSCTP() {
			any = true
		} else {
			all = false
		}
	}
	return all, any
}

func (s sourceSubtest) probesSCTP() bool {
	for _, p := range s.probes {
		if p.protocol == "sctp" {
			return true
		}
	}
	return false
}

// readSuite parses the suite's tests at the release cnpbuild pins.
func readSuite(t *testing.T) (string, suiteSource) {
	t.Helper()
	dir, err := ModuleDir("../cnpbuild")
	if err != nil {
		t.Skipf("the suite's source: %v", err)
	}
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "conformance/tests/*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no tests in %s (%v)", dir, err)
	}
	var src suiteSource
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok || exprString(lit.Type) != "suite.ConformanceTest" {
				return true
			}
			src.tests = append(src.tests, readTest(t, fset, lit))
			return false
		})
	}
	if len(src.tests) == 0 {
		t.Fatalf("no suite.ConformanceTest in %s", dir)
	}
	return dir, src
}

func readTest(t *testing.T, fset *token.FileSet, lit *ast.CompositeLit) sourceTest {
	var st sourceTest
	for _, e := range lit.Elts {
		kv, ok := e.(*ast.KeyValueExpr)
		if !ok {
			continue
		}
		switch exprString(kv.Key) {
		case "ShortName":
			st.name = stringLit(t, kv.Value)
		case "Features":
			for _, f := range kv.Value.(*ast.CompositeLit).Elts {
				if exprString(f) != "suite.SupportClusterNetworkPolicy" {
					st.experimental = true
				}
			}
		case "Test":
			body := kv.Value.(*ast.FuncLit).Body
			ast.Inspect(body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				switch exprString(call.Fun) {
				case "t.Run":
					sub := sourceSubtest{name: stringLit(t, call.Args[0])}
					ast.Inspect(call.Args[1], func(n ast.Node) bool {
						if c, ok := n.(*ast.CallExpr); ok {
							if exprString(c.Fun) == "t.Run" {
								t.Fatalf("%s: a subtest of a subtest", fset.Position(c.Pos()))
							}
							if p, ok := readProbe(t, c); ok {
								sub.probes = append(sub.probes, p)
							}
						}
						return true
					})
					st.subtests = append(st.subtests, sub)
					return false
				}
				if p, ok := readProbe(t, call); ok {
					st.direct = append(st.direct, p)
				}
				return true
			})
		}
	}
	if st.name == "" {
		t.Fatalf("%s: a test without a ShortName", fset.Position(lit.Pos()))
	}
	return st
}

func readProbe(t *testing.T, c *ast.CallExpr) (probe, bool) {
	if exprString(c.Fun) != "kubernetes.PokeServer" {
		return probe{}, false
	}
	// PokeServer(t, client, kubeConfig, clientNamespace, clientPod,
	// protocol, targetHost, targetPort, timeoutConfig, shouldConnect)
	if len(c.Args) != 10 {
		t.Fatalf("PokeServer with %d arguments: the suite changed", len(c.Args))
	}
	return probe{protocol: stringLit(t, c.Args[5]), target: exprString(c.Args[6])}, true
}

func stringLit(t *testing.T, e ast.Expr) string {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		t.Fatalf("want a string literal, have %s", exprString(e))
	}
	s, err := strconv.Unquote(lit.Value)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	case *ast.BasicLit:
		return e.Value
	}
	return "?"
}

// TestSCTPSkips proves SCTPSkips against the suite's source: a test is
// skipped whole exactly when every one of its subtests probes SCTP, a
// subtest exactly when it probes SCTP and its test is not skipped whole,
// and nothing that probes no SCTP is skipped. Experimental matches the
// test's features, which CorrectReport relies on.
func TestSCTPSkips(t *testing.T) {
	_, src := readSuite(t)
	want := map[string]bool{}
	experimental := map[string]bool{}
	for _, st := range src.tests {
		experimental[st.name] = st.experimental
		for _, p := range st.direct {
			if p.protocol == "sctp" {
				t.Errorf("%s probes SCTP outside a subtest: skip it whole", st.name)
			}
		}
		all, any := st.probesSCTP()
		switch {
		case all:
			want[Skip{Test: st.name}.Name()] = true
		case any:
			for _, s := range st.subtests {
				if s.probesSCTP() {
					want[Skip{Test: st.name, Subtest: s.name}.Name()] = true
				}
			}
		}
	}
	have := map[string]bool{}
	for _, s := range SCTPSkips {
		if have[s.Name()] {
			t.Errorf("%s is in SCTPSkips twice", s.Name())
		}
		have[s.Name()] = true
		if !want[s.Name()] {
			t.Errorf("SCTPSkips has %s, which is no test or subtest that probes SCTP (or its test should be skipped whole)", s.Name())
		}
		if e, ok := experimental[s.Test]; !ok {
			t.Errorf("SCTPSkips: no test %s in the suite", s.Test)
		} else if e != s.Experimental {
			t.Errorf("SCTPSkips: %s: Experimental %v, the suite's features say %v", s.Name(), s.Experimental, e)
		}
		if s.Reason == "" || s.Why == "" {
			t.Errorf("SCTPSkips: %s without a reason", s.Name())
		}
	}
	for n := range want {
		if !have[n] {
			t.Errorf("%s probes SCTP and is not in SCTPSkips", n)
		}
	}
}

// podIP is the one kind of target the suite's probes may have: a pod's
// IP as the API reports it (a host-network pod's is its node's).
var podIP = regexp.MustCompile(`^[A-Za-z0-9_]+\.Status\.PodIP$`)

// TestNetworkSafety is the argument that the suite sends nothing outside
// the harness, checked on its source, so that a release that adds an
// outside destination fails here rather than on the underlay: every probe
// targets a pod's IP from the API; nothing else in the tests opens a
// connection or execs a command; no policy names a domain (FQDN rules,
// which an implementation resolves through DNS, are not in v0.3.0; a
// release that tests them needs a skip list of its own first); the
// manifests name no address but the match-all networks of the CIDR tests,
// which a policy matches and no probe targets.
func TestNetworkSafety(t *testing.T) {
	dir, src := readSuite(t)
	for _, st := range src.tests {
		probes := st.direct
		for _, s := range st.subtests {
			probes = append(probes, s.probes...)
		}
		for _, p := range probes {
			if !podIP.MatchString(p.target) {
				t.Errorf("%s probes %s, not a pod's IP", st.name, p.target)
			}
		}
	}
	tests, err := filepath.Glob(filepath.Join(dir, "conformance/tests/*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range tests {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, banned := range []string{"RunCommandFromPod", "net.Dial", "http.Get", "exec.Command", "DomainNames"} {
			if strings.Contains(string(data), banned) {
				t.Errorf("%s uses %s: read it and extend the network-safety argument", filepath.Base(f), banned)
			}
		}
	}
	address := regexp.MustCompile(`\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b|[0-9a-fA-F]*::[0-9a-fA-F:/]*`)
	allowed := map[string]bool{"0.0.0.0": true, "::/0": true}
	err = filepath.WalkDir(filepath.Join(dir, "conformance/base"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.Contains(string(data), "domainNames") {
			t.Errorf("%s: a policy names domains", p)
		}
		for _, a := range address.FindAllString(string(data), -1) {
			if !allowed[a] {
				t.Errorf("%s names the address %s", p, a)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
