package netpol

import (
	"testing"
	"time"

	"github.com/podnet/podnet/dataplane/policyrules"
	"github.com/podnet/podnet/policy"
)

// blockingRenderer is a rebuild that takes as long as the test wants:
// Apply and Resync wait for release.
type blockingRenderer struct {
	entered, release chan struct{}
}

func (b *blockingRenderer) Apply(*policy.IR) (policyrules.Stats, error) {
	select {
	case b.entered <- struct{}{}:
	default:
	}
	<-b.release
	return policyrules.Stats{}, nil
}

func (b *blockingRenderer) Resync(ir *policy.IR) (policyrules.Stats, error) { return b.Apply(ir) }
func (b *blockingRenderer) Counters() (policyrules.Counters, error) {
	return policyrules.Counters{}, nil
}
func (b *blockingRenderer) Close() error { return nil }

// TestReadyDuringLongRebuild: while a rebuild holds the renderer (a
// large node's first apply), Ready answers at once: /readyz, and the
// agent's /healthz, which asks no service at all, never wait for it.
func TestReadyDuringLongRebuild(t *testing.T) {
	c := newCluster(t)
	r := &blockingRenderer{entered: make(chan struct{}, 1), release: make(chan struct{})}
	s := startService(t, c, r, Config{})
	t.Cleanup(func() { close(r.release) })
	select {
	case <-r.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("no rebuild started")
	}
	done := make(chan error, 1)
	go func() { done <- s.Ready() }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("ready while the first apply has not finished")
		}
	case <-time.After(time.Second):
		t.Fatal("Ready blocked behind the rebuild")
	}
}
