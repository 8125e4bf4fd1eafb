package cnpconformance

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/podnet/podnet/test/k8s/cluster"
)

// TestSkipPattern runs go test's own matcher on skipPattern: a stand-in
// for the suite with its tests and subtests (names from its source),
// run with the pattern, must run everything but the skips.
func TestSkipPattern(t *testing.T) {
	_, src := readSuite(t)
	var body strings.Builder
	for _, st := range src.tests {
		fmt.Fprintf(&body, "\tt.Run(%q, func(t *testing.T) {\n", st.name)
		for _, s := range st.subtests {
			fmt.Fprintf(&body, "\t\tt.Run(%q, func(t *testing.T) {})\n", s.name)
		}
		body.WriteString("\t})\n")
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":        "module standin\n\ngo 1.24\n",
		"suite_test.go": "package standin\n\nimport \"testing\"\n\nfunc " + suiteTest + "(t *testing.T) {\n" + body.String() + "}\n",
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "test", "-count=1", "-json", "-run", "^"+suiteTest+"$", "-skip", skipPattern(SCTPSkips), ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go test: %v\n%s", err, out)
	}
	ran := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var e event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatal(err)
		}
		if e.Action == "run" {
			ran[e.Test] = true
		}
	}
	skipped := map[string]bool{}
	for _, s := range SCTPSkips {
		skipped[s.Name()] = true
	}
	for _, st := range src.tests {
		name := Skip{Test: st.name}.Name()
		if ran[name] == skipped[name] {
			t.Errorf("%s: ran %v, skipped by name %v", name, ran[name], skipped[name])
		}
		for _, s := range st.subtests {
			sub := Skip{Test: st.name, Subtest: s.name}.Name()
			if want := !skipped[name] && !skipped[sub]; ran[sub] != want {
				t.Errorf("%s: ran %v, want %v", sub, ran[sub], want)
			}
		}
	}
}

// TestCNPVersion: the wrapper module pins the release the harness names.
func TestCNPVersion(t *testing.T) {
	data, err := os.ReadFile("../cnpbuild/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if want := SuiteModule + " " + cluster.CNPVersion; !strings.Contains(string(data), want) {
		t.Errorf("cnpbuild/go.mod does not require %s", want)
	}
}

// TestPorterWithoutSCTP runs the image's /agnhost wrapper with a
// stand-in agnhost that prints its arguments.
func TestPorterWithoutSCTP(t *testing.T) {
	if _, err := os.Stat(bash); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	fake := filepath.Join(dir, "agnhost")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(dir, "wrapper")
	if err := os.WriteFile(wrapper, []byte(strings.ReplaceAll(porterWithoutSCTP, program, fake)), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{[]string{"SERVE_SCTP_PORT_9003=foo"}, []string{"porter"}, "pause"},
		{[]string{"SERVE_SCTP_PORT_9003=foo", "SERVE_PORT_80=bar"}, []string{"porter"}, "porter"},
		{[]string{"SERVE_TLS_PORT_443=bar"}, []string{"porter"}, "porter"},
		{nil, []string{"porter"}, "porter"},
		{[]string{"SERVE_SCTP_PORT_9003=foo"}, []string{"connect", "--protocol=tcp", "10.244.0.5:80"}, "connect --protocol=tcp 10.244.0.5:80"},
		{nil, []string{"serve-hostname", "--tcp", "--http=false", "--port", "80"}, "serve-hostname --tcp --http=false --port 80"},
	} {
		cmd := exec.Command(wrapper, tc.args...)
		cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, tc.env...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v %v: %v", tc.env, tc.args, err)
		}
		if got := strings.TrimSpace(string(out)); got != tc.want {
			t.Errorf("%v %v: ran agnhost %q, want %q", tc.env, tc.args, got, tc.want)
		}
	}
}

func TestImage(t *testing.T) {
	if _, err := os.Stat(bash); err != nil {
		t.Skip(err)
	}
	prog := filepath.Join(t.TempDir(), "agnhost")
	if err := os.WriteFile(prog, []byte("agnhost"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, sctp := range []bool{true, false} {
		img, err := Image(prog, sctp)
		if err != nil {
			t.Fatal(err)
		}
		files := map[string]string{}
		for _, f := range img.Files {
			files[f.Path] = string(f.Data)
		}
		if _, ok := files[bash]; !ok {
			t.Errorf("kernelSCTP %v: no %s", sctp, bash)
		}
		want := map[bool]string{true: "agnhost", false: porterWithoutSCTP}[sctp]
		if files["/agnhost"] != want {
			t.Errorf("kernelSCTP %v: /agnhost is %.40q, want %.40q", sctp, files["/agnhost"], want)
		}
		if _, ok := files[program]; ok == sctp {
			t.Errorf("kernelSCTP %v: %s present %v", sctp, program, ok)
		}
		if img.Name != AgnhostImage || strings.Join(img.Entrypoint, " ") != "/agnhost" || strings.Join(img.Cmd, " ") != "pause" {
			t.Errorf("image %s %v %v", img.Name, img.Entrypoint, img.Cmd)
		}
	}
}

func writeEvents(t *testing.T, events []event) string {
	t.Helper()
	var b strings.Builder
	for _, e := range events {
		data, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
		b.WriteByte('\n')
	}
	p := filepath.Join(t.TempDir(), "events.json")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRead(t *testing.T) {
	const top = suiteTest + "/"
	skips := []Skip{{Test: "CNPAdminTierIngressSCTP", Reason: noSCTP, Why: "x"},
		{Test: "CNPAdminTierEgressNodePeers", Subtest: "Should deny", Reason: noSCTP, Why: "x"}}
	p := writeEvents(t, []event{
		{Action: "run", Test: suiteTest},
		{Action: "output", Test: top + "CNPAdminTierIngressTCP/Should_allow", Output: "helper.go:120: Expected connection to fail from a to b, but instead it successfully connected.\n"},
		{Action: "fail", Test: top + "CNPAdminTierIngressTCP/Should_allow", Elapsed: 11},
		{Action: "pass", Test: top + "CNPAdminTierIngressTCP/Should_pass"},
		{Action: "fail", Test: top + "CNPAdminTierIngressTCP"},
		{Action: "output", Test: top + "CNPAdminTierEgressNodePeers/Should_allow", Output: "helper.go:96: FAILED to execute command [/agnhost connect] on pod x/y: boom\n"},
		{Action: "fail", Test: top + "CNPAdminTierEgressNodePeers/Should_allow"},
		{Action: "fail", Test: top + "CNPAdminTierEgressNodePeers"},
		{Action: "skip", Test: top + "CNPAdminTierEgressNamedPort"},
		{Action: "fail", Test: suiteTest},
	})
	r, err := Read(p, skips)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Problems) > 0 {
		t.Errorf("problems: %v", r.Problems)
	}
	if got, want := Count(r.Tests).String(), "0 passed, 2 failed, 2 skipped (1 by name)"; got != want {
		t.Errorf("tests: %s, want %s", got, want)
	}
	if got, want := Count(r.Subtests).String(), "1 passed, 2 failed, 1 skipped (1 by name)"; got != want {
		t.Errorf("subtests: %s, want %s", got, want)
	}
	for _, o := range r.Subtests {
		switch o.Name {
		case "CNPAdminTierIngressTCP/Should_allow":
			if Harness(o) || !strings.Contains(Why(o), "not enforced") {
				t.Errorf("%s: harness %v, why %q", o.Name, Harness(o), Why(o))
			}
		case "CNPAdminTierEgressNodePeers/Should_allow":
			if !Harness(o) {
				t.Errorf("%s: not the harness's: %q", o.Name, Why(o))
			}
		}
	}
	// The test's output holds its subtests'.
	for _, o := range r.Tests {
		if o.Name == "CNPAdminTierIngressTCP" && !strings.Contains(o.Output, "successfully connected") {
			t.Errorf("%s: output %q", o.Name, o.Output)
		}
	}

	// A skip that ran, and a suite whose setup failed.
	p = writeEvents(t, []event{
		{Action: "pass", Test: top + "CNPAdminTierIngressSCTP"},
		{Action: "fail", Test: suiteTest},
	})
	r, err = Read(p, skips)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Problems) != 1 || !strings.Contains(r.Problems[0], "ran although skipped") {
		t.Errorf("problems: %q", r.Problems)
	}
	p = writeEvents(t, []event{{Action: "fail", Test: suiteTest}})
	if r, err = Read(p, nil); err != nil {
		t.Fatal(err)
	}
	if len(r.Problems) != 1 || !strings.Contains(r.Problems[0], "ran no test") {
		t.Errorf("problems: %q", r.Problems)
	}
}

// suiteReport is a report as the suite writes it (its layout at v0.3.0).
const suiteReport = `apiVersion: policy.networking.k8s.io/v1alpha1
kind: ConformanceReport
networkPolicyBundleVersion: v0.3.0
profiles:
- experimental:
    result: failure
    statistics:
      Failed: 2
      Passed: 4
      Skipped: 0
    summary: ""
    failedTests:
    - CNPAdminTierEgressNamedPort
    - CNPBaselineTierIngressNamedPort
    supportedFeatures:
    - ClusterNetworkPolicyNamedPorts
    - ClusterNetworkPolicyEgressNodePeers
  name: ClusterNetworkPolicy
  standard:
    result: success
    statistics:
      Failed: 0
      Passed: 22
      Skipped: 0
    summary: ""
`

func TestCorrectReport(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "suite-report.yaml"), filepath.Join(dir, "report.yaml")
	if err := os.WriteFile(src, []byte(suiteReport), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CorrectReport(src, dst, SCTPSkips); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Profiles []struct {
			Name         string
			Standard     status
			Experimental status
		}
	}
	if err := yaml.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	std, exp := r.Profiles[0].Standard, r.Profiles[0].Experimental
	if std.Result != "failure" || std.Statistics.Passed != 12 || std.Statistics.Skipped != 10 || len(std.SkippedTests) != 10 ||
		!strings.HasPrefix(std.Summary, "required tests skipped: CNPAdminTierIngressSCTP, ") {
		t.Errorf("standard: %+v", std)
	}
	if exp.Result != "failure" || exp.Statistics.Passed != 4 || exp.Statistics.Failed != 2 || len(exp.FailedTests) != 2 ||
		!strings.HasPrefix(exp.Summary, "subtests skipped by name: CNPAdminTierEgressNodePeers/Should_support_a_'deny-egress'") {
		t.Errorf("experimental: %+v", exp)
	}
}

type status struct {
	Result     string
	Summary    string
	Statistics struct {
		Passed, Failed, Skipped int
	}
	SkippedTests []string `json:"skippedTests"`
	FailedTests  []string `json:"failedTests"`
}

// TestCommand: the logged command line, run by a shell, gives the
// suite the arguments Args gives it.
func TestCommand(t *testing.T) {
	r := Run{Bin: "/cache/bin", Kubeconfig: "/tmp/a b/kc", NetNS: "/run/netns/x", Dir: "/res", Skips: SCTPSkips, Version: "v1"}
	out, err := exec.Command("sh", "-c", "printf '%s\\n' "+strings.TrimPrefix(r.Command(), "KUBECONFIG="+shellQuote(r.Kubeconfig)+" ")).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSuffix(string(out), "\n"), strings.Join(r.Args(), "\n"); got != want {
		t.Errorf("the shell read\n%s\nwant\n%s", got, want)
	}
}

func TestWithin(t *testing.T) {
	in, err := Within(SCTPSkips, "AdminTierEgress(SCTP|NodePeers)$")
	if err != nil {
		t.Fatal(err)
	}
	if len(in) != 2 || in[0].Test != "CNPAdminTierEgressSCTP" || in[1].Test != "CNPAdminTierEgressNodePeers" {
		t.Errorf("Within: %+v", in)
	}
	if all, _ := Within(SCTPSkips, ""); len(all) != len(SCTPSkips) {
		t.Errorf("Within with no focus: %d of %d", len(all), len(SCTPSkips))
	}
	if _, err := Within(SCTPSkips, "("); err == nil {
		t.Error("Within(\"(\"): no error")
	}
}
