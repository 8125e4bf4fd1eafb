package main

import (
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"

	"k8s.io/klog/v2"
)

// TestKlogThroughSlog: once the CLI has set up logging, what client-go
// logs through klog comes out as the agent's own slog lines, at the
// level asked for, with the logger named.
func TestKlogThroughSlog(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	oldStderr, oldDefault := os.Stderr, slog.Default()
	os.Stderr = w
	t.Cleanup(func() {
		os.Stderr = oldStderr
		slog.SetDefault(oldDefault)
	})
	o := &globalOptions{logLevel: "info"}
	if err := o.setupLogging(); err != nil {
		t.Fatal(err)
	}
	klog.Error("watch of *v1.Pod ended with: an error on the server")
	klog.V(4).Info("too verbose to show at info")
	klog.Flush()
	w.Close()
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	if !strings.Contains(got, "level=ERROR") || !strings.Contains(got, "logger=client-go") ||
		!strings.Contains(got, `msg="watch of *v1.Pod ended with: an error on the server"`) {
		t.Errorf("klog's error as slog: %q", got)
	}
	if strings.Contains(got, "too verbose") {
		t.Errorf("a V(4) message at level info: %q", got)
	}
}
