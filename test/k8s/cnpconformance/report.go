package cnpconformance

import (
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/yaml"
)

// CorrectReport rewrites the suite's report (src, what -report-output
// wrote) into dst with the skips recorded as skips. The suite (v0.3.0)
// counts a test go test's -test.skip left out as passed: its t.Run returns
// true for a test that never ran, and the suite's own SkipTests option
// has no flag. dst says what the suite says when a test is in SkipTests:
// the test among the skipped, not the passed, and the level failed
// ("required tests skipped"), for this machine cannot show those tests
// pass. A subtest skipped by name is named in the level's summary (the
// report has no place for subtests). Everything else is the suite's.
func CorrectReport(src, dst string, skips []Skip) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	var report map[string]any
	if err := yaml.Unmarshal(data, &report); err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	profiles, _ := report["profiles"].([]any)
	for _, p := range profiles {
		pm, _ := p.(map[string]any)
		if pm["name"] != Profile {
			continue
		}
		for _, experimental := range []bool{false, true} {
			var whole, sub []string
			for _, s := range skips {
				if s.Experimental != experimental {
					continue
				}
				if s.Subtest == "" {
					whole = append(whole, s.Test)
				} else {
					sub = append(sub, s.Test+"/"+strings.ReplaceAll(s.Subtest, " ", "_"))
				}
			}
			if len(whole)+len(sub) == 0 {
				continue
			}
			level := "standard"
			if experimental {
				level = "experimental"
			}
			status, _ := pm[level].(map[string]any)
			if status == nil {
				return fmt.Errorf("%s: profile %s has no %s level", src, Profile, level)
			}
			if err := recordSkips(status, whole, sub); err != nil {
				return fmt.Errorf("%s: %s: %w", src, level, err)
			}
		}
	}
	out, err := yaml.Marshal(report)
	if err != nil {
		return err
	}
	header := "# The suite's report (suite-report.yaml beside this file), with the tests\n" +
		"# skipped by name recorded as skipped rather than passed: see docs/conformance.md.\n"
	return os.WriteFile(dst, append([]byte(header), out...), 0o644)
}

// recordSkips moves the whole tests from passed to skipped in one level's
// status and names the subtests in its summary.
func recordSkips(status map[string]any, whole, sub []string) error {
	stats, _ := status["statistics"].(map[string]any)
	if stats == nil {
		return fmt.Errorf("no statistics")
	}
	passed, _ := stats["Passed"].(float64)
	if int(passed) < len(whole) {
		return fmt.Errorf("%d passed, fewer than the %d tests skipped by name", int(passed), len(whole))
	}
	skipped, _ := stats["Skipped"].(float64)
	stats["Passed"] = int(passed) - len(whole)
	stats["Skipped"] = int(skipped) + len(whole)
	var summary []string
	if s, _ := status["summary"].(string); s != "" {
		summary = append(summary, s)
	}
	if len(whole) > 0 {
		names, _ := status["skippedTests"].([]any)
		for _, n := range whole {
			names = append(names, n)
		}
		status["skippedTests"] = names
		status["result"] = "failure"
		summary = append(summary, "required tests skipped: "+strings.Join(whole, ", "))
	}
	if len(sub) > 0 {
		summary = append(summary, "subtests skipped by name: "+strings.Join(sub, ", "))
	}
	status["summary"] = strings.Join(summary, "; ")
	return nil
}
