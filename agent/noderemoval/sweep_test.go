package noderemoval

import (
	"slices"
	"testing"
	"time"
)

func TestRemovalSweep(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := &removalSweep{self: "b", grace: 5 * time.Minute, departed: map[string]time.Time{}}
	live := []string{"c", "a", "b"}
	indexed := []string{"a", "ab", "b", "z"}
	if got := r.due(t0, indexed, live); len(got) != 0 {
		t.Fatalf("first sighting: %v", got)
	}
	if got := r.due(t0.Add(4*time.Minute), indexed, live); len(got) != 0 {
		t.Fatalf("within the grace: %v", got)
	}
	if got := r.due(t0.Add(5*time.Minute), indexed, live); !slices.Equal(got, []string{"ab", "z"}) {
		t.Fatalf("after the grace: %v, want [ab z] (any live agent removes a departed node)", got)
	}
	// ab registers again: forgotten; z removed by a: forgotten.
	if got := r.due(t0.Add(6*time.Minute), []string{"a", "ab", "b"}, []string{"a", "ab", "b", "c"}); len(got) != 0 || len(r.departed) != 0 {
		t.Fatalf("after ab came back and z went: %v, departed %v", got, r.departed)
	}
	// An agent whose own Node is missing acts on nothing.
	lost := &removalSweep{self: "q", grace: 0, departed: map[string]time.Time{}}
	if got := lost.due(t0, []string{"x"}, []string{"a"}); got != nil {
		t.Fatalf("agent without its Node: %v", got)
	}
}
