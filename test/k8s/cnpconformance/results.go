package cnpconformance

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

// Outcome is how one test or subtest of the suite ended.
type Outcome struct {
	// Name is go test's name below the suite's top-level test:
	// "CNPAdminTierIngressTCP" or "CNPAdminTierIngressTCP/Should_...".
	Name string
	// Result is "pass", "fail" or "skip" (the suite skips a test whose
	// features the run does not opt into), or SkippedByName.
	Result string
	// Elapsed is in seconds.
	Elapsed float64
	// Output is what the test printed, its subtests' output included.
	Output string
	// Skip is the skip that left it out, when Result is SkippedByName.
	Skip *Skip
}

// SkippedByName is the Result of a test or subtest the run left out by
// name (go test's -test.skip): it has no events at all.
const SkippedByName = "skipped by name"

// Results are a run's outcomes, from its events.
type Results struct {
	// Suite is the top-level test, TestConformanceProfiles: it fails
	// alone, with no test run, when the suite's setup fails.
	Suite Outcome
	// Tests are the suite's tests (a ShortName each), Subtests theirs.
	Tests, Subtests []Outcome
	// Problems are what went wrong with the run rather than with a
	// test: a skip that did not hold, a suite that ran no test.
	Problems []string
}

// event is one line of test2json's output (cmd/test2json's TestEvent).
type event struct {
	Action  string
	Test    string
	Elapsed float64
	Output  string
}

// Read reads the events the run left at path and adds the skips as
// outcomes of their own.
func Read(path string, skips []Skip) (*Results, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	output := map[string]*strings.Builder{}
	done := map[string]Outcome{}
	var order []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("%s: %w: %q", path, err, sc.Bytes())
		}
		if e.Test == "" {
			continue
		}
		switch e.Action {
		case "output":
			// A subtest's output is its test's too, as go test shows it.
			for n := e.Test; ; {
				b := output[n]
				if b == nil {
					b = &strings.Builder{}
					output[n] = b
				}
				b.WriteString(e.Output)
				i := strings.LastIndexByte(n, '/')
				if i < 0 {
					break
				}
				n = n[:i]
			}
		case "pass", "fail", "skip":
			if _, ok := done[e.Test]; !ok {
				order = append(order, e.Test)
			}
			done[e.Test] = Outcome{Result: e.Action, Elapsed: e.Elapsed}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	r := &Results{}
	for _, name := range order {
		o := done[name]
		if b := output[name]; b != nil {
			o.Output = b.String()
		}
		rel, ok := strings.CutPrefix(name, suiteTest+"/")
		switch {
		case name == suiteTest:
			o.Name = name
			r.Suite = o
		case !ok:
			r.Problems = append(r.Problems, fmt.Sprintf("a test that is not the suite's ran: %s", name))
		case !strings.Contains(rel, "/"):
			o.Name = rel
			r.Tests = append(r.Tests, o)
		default:
			o.Name = rel
			r.Subtests = append(r.Subtests, o)
		}
	}
	if r.Suite.Result == "" {
		r.Problems = append(r.Problems, "the suite never finished (no result for "+suiteTest+"); see suite.log")
	} else if len(r.Tests) == 0 {
		r.Problems = append(r.Problems, fmt.Sprintf("the suite ran no test (%s: %s): its setup failed?", suiteTest, r.Suite.Result))
	}
	for i := range skips {
		s := &skips[i]
		name := strings.TrimPrefix(s.Name(), suiteTest+"/")
		if _, ran := done[s.Name()]; ran {
			r.Problems = append(r.Problems, fmt.Sprintf("%s ran although skipped by name", name))
			continue
		}
		o := Outcome{Name: name, Result: SkippedByName, Skip: s}
		if s.Subtest == "" {
			r.Tests = append(r.Tests, o)
		} else {
			r.Subtests = append(r.Subtests, o)
		}
	}
	sort.SliceStable(r.Tests, func(i, j int) bool { return r.Tests[i].Name < r.Tests[j].Name })
	sort.SliceStable(r.Subtests, func(i, j int) bool { return r.Subtests[i].Name < r.Subtests[j].Name })
	return r, nil
}

// SuiteLog writes the run's output as go test -v would have printed it,
// from the events at path.
func SuiteLog(path, dst string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var b strings.Builder
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Action == "output" {
			b.WriteString(e.Output)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return os.WriteFile(dst, []byte(b.String()), 0o644)
}

// Counts are outcomes by result; Skipped counts both kinds of skip.
type Counts struct {
	Passed, Failed, Skipped, SkippedByName int
}

// Count counts outcomes.
func Count(os []Outcome) Counts {
	var c Counts
	for _, o := range os {
		switch o.Result {
		case "pass":
			c.Passed++
		case "fail":
			c.Failed++
		case SkippedByName:
			c.SkippedByName++
			c.Skipped++
		default:
			c.Skipped++
		}
	}
	return c
}

func (c Counts) String() string {
	s := fmt.Sprintf("%d passed, %d failed, %d skipped", c.Passed, c.Failed, c.Skipped)
	if c.SkippedByName > 0 {
		s += fmt.Sprintf(" (%d by name)", c.SkippedByName)
	}
	return s
}

// failure classes: what a failed subtest's probes said, from the
// suite's own log lines (utils/kubernetes/helper.go's doPokeServer).
var failureClasses = []struct {
	marker, class string
}{
	{"FAILED to execute command", "the probe's exec into the client failed (harness)"},
	{"but instead it successfully connected", "connected where the policy denies (not enforced)"},
	{"but instead it miserably failed", "blocked where the policy allows"},
	{"but instead it returned a different status", "refused where the policy drops (not a timeout)"},
}

// Why says why a failed test or subtest failed: its probes' failure
// classes, or its first error line.
func Why(o Outcome) string {
	var classes []string
	for _, fc := range failureClasses {
		if strings.Contains(o.Output, fc.marker) {
			classes = append(classes, fc.class)
		}
	}
	if len(classes) > 0 {
		return strings.Join(classes, "; ")
	}
	for _, l := range strings.Split(o.Output, "\n") {
		if t := strings.TrimSpace(l); strings.HasPrefix(t, "Error:") || strings.Contains(t, "Error ") {
			return t
		}
	}
	return "no probe failed: see the test's output"
}

// Harness reports whether a failure is the harness's rather than the
// policy's: a probe that could not exec, or no probe at all.
func Harness(o Outcome) bool {
	return strings.Contains(o.Output, failureClasses[0].marker) ||
		!strings.Contains(o.Output, "Expected connection to")
}
