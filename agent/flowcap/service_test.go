package flowcap

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/podnet/podnet/flows"
)

func TestRunFailsClearly(t *testing.T) {
	if err := New(Config{}).Run(context.Background()); err == nil || !strings.Contains(err.Error(), "no sink") {
		t.Errorf("Run without a sink: %v", err)
	}
	s := New(Config{NetNS: "/nonexistent/netns", Sink: func(flows.Record) {}})
	if err := s.Ready(); err == nil || !strings.Contains(err.Error(), "not listening yet") {
		t.Errorf("Ready before Run: %v", err)
	}
	err := s.Run(context.Background())
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Run in a namespace that does not exist: %v", err)
	}
	if r := s.Ready(); r == nil || !strings.Contains(r.Error(), "/nonexistent/netns") {
		t.Errorf("Ready after a failed start: %v, want the namespace named", r)
	}
	select {
	case <-s.ReadyC():
		t.Error("ReadyC closed though the capture never listened")
	default:
	}
}
