package conformance

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Spec is one spec of a ginkgo report: its full text as focus and skip
// expressions match it, its labels, and how it ended.
type Spec struct {
	Name   string
	Labels []string
	// State is ginkgo's: passed, skipped, failed, pending, panicked,
	// interrupted, aborted, timedout. A dry run reports every spec it
	// would run as passed and every other one as skipped.
	State   string
	RunTime time.Duration
	// Failure is the failure's message and place, "" unless it failed.
	Failure string
	// Output is what the spec wrote: its GinkgoWriter output (the
	// framework's log, steps and events) and its captured stdout/stderr.
	Output string
}

// HasLabel reports whether s carries label l.
func (s Spec) HasLabel(l string) bool {
	for _, x := range s.Labels {
		if x == l {
			return true
		}
	}
	return false
}

// The part of ginkgo v2's JSON report (types.Report) read here.
type ginkgoReport struct {
	SuiteDescription string
	SpecReports      []struct {
		ContainerHierarchyTexts    []string
		ContainerHierarchyLabels   [][]string
		LeafNodeType               string
		LeafNodeText               string
		LeafNodeLabels             []string
		State                      string
		RunTime                    time.Duration
		CapturedGinkgoWriterOutput string
		CapturedStdOutErr          string
		Failure                    *struct {
			Message  string
			Location struct {
				FileName   string
				LineNumber int
			}
		}
	}
}

// ReadReport reads the specs of a ginkgo JSON report
// (--ginkgo.json-report): the It nodes only, not the suite's setup nodes.
func ReadReport(path string) ([]Spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var reports []ginkgoReport
	if err := json.Unmarshal(data, &reports); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var specs []Spec
	for _, r := range reports {
		for _, sr := range r.SpecReports {
			if sr.LeafNodeType != "It" {
				continue
			}
			texts := append(append([]string{}, sr.ContainerHierarchyTexts...), sr.LeafNodeText)
			labels := map[string]bool{}
			for _, ls := range sr.ContainerHierarchyLabels {
				for _, l := range ls {
					labels[l] = true
				}
			}
			for _, l := range sr.LeafNodeLabels {
				labels[l] = true
			}
			s := Spec{Name: strings.Join(texts, " "), State: sr.State, RunTime: sr.RunTime}
			for l := range labels {
				s.Labels = append(s.Labels, l)
			}
			sort.Strings(s.Labels)
			if sr.Failure != nil && sr.Failure.Message != "" {
				s.Failure = fmt.Sprintf("%s:%d: %s", sr.Failure.Location.FileName, sr.Failure.Location.LineNumber, sr.Failure.Message)
			}
			s.Output = sr.CapturedGinkgoWriterOutput
			if sr.CapturedStdOutErr != "" {
				s.Output += "\n--- stdout and stderr ---\n" + sr.CapturedStdOutErr
			}
			specs = append(specs, s)
		}
	}
	sort.Slice(specs, func(i, j int) bool { return specs[i].Name < specs[j].Name })
	return specs, nil
}

// Counts are a run's specs by how they ended.
type Counts struct{ Passed, Failed, Skipped int }

// Count counts specs: passed, skipped (by the selection or by the spec
// itself), and failed (every other ending: failed, panicked, timed out,
// interrupted, aborted).
func Count(specs []Spec) Counts {
	var c Counts
	for _, s := range specs {
		switch s.State {
		case "passed":
			c.Passed++
		case "skipped", "pending":
			c.Skipped++
		default:
			c.Failed++
		}
	}
	return c
}

// String is the closing line of a run: "N passed, N failed, N skipped".
func (c Counts) String() string {
	return fmt.Sprintf("%d passed, %d failed, %d skipped", c.Passed, c.Failed, c.Skipped)
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// LogName is the file name of a spec's log: its text with every run of
// other characters than letters, digits, '.', '_' and '-' made one '_',
// cut to a length file systems take, with a short hash of the whole
// text so that two long texts with the same start do not collide.
func LogName(name string) string {
	s := strings.Trim(unsafeName.ReplaceAllString(name, "_"), "_")
	if len(s) > 180 {
		s = s[:180]
	}
	var h uint32 = 2166136261 // FNV-1a
	for i := 0; i < len(name); i++ {
		h ^= uint32(name[i])
		h *= 16777619
	}
	return fmt.Sprintf("%s-%08x.log", s, h)
}

// WriteSpecLogs writes a log per spec that ran into dir (one file each,
// named by LogName): its state, run time, failure (for a spec that
// skipped itself, the reason) and output. Specs the selection left out
// get none.
func WriteSpecLogs(dir string, specs []Spec) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, s := range specs {
		if (s.State == "skipped" || s.State == "pending") && s.Failure == "" && s.Output == "" {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%s\nstate: %s\nrun time: %s\n", s.Name, s.State, s.RunTime.Round(time.Millisecond))
		if s.Failure != "" {
			fmt.Fprintf(&b, "failure: %s\n", s.Failure)
		}
		b.WriteString("\n")
		b.WriteString(s.Output)
		if err := os.WriteFile(filepath.Join(dir, LogName(s.Name)), []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	return nil
}
