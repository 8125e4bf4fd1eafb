package skel

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// With an absolute path, the report is appended to the file, one whole
// line per call, with the CPU and fault counts.
func TestReportTimingToFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "timing")
	t.Setenv("CNI_COMMAND", "ADD")
	reportTiming(f, time.Now())
	reportTiming(f, time.Now())
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`(?m)^\S+ ADD: [0-9.]+ ms in main, cpu user [0-9.]+ ms sys [0-9.]+ ms, [0-9]+ minor faults$`)
	if n := len(line.FindAll(b, -1)); n != 2 {
		t.Fatalf("want 2 report lines, got %d in %q", n, b)
	}
}
