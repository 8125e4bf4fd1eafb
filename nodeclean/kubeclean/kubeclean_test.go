package kubeclean

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
)

func TestPodnetAnnotations(t *testing.T) {
	got := PodnetAnnotations(map[string]string{
		"podnet.io/vtep-mac": "x", "podnet.io/underlay-address": "y", "example.com/podnet.io": "z", "podnet.iox/a": "w",
	})
	if want := []string{"podnet.io/underlay-address", "podnet.io/vtep-mac"}; !slices.Equal(got, want) {
		t.Errorf("%q, want %q", got, want)
	}
	if got := PodnetAnnotations(nil); got != nil {
		t.Errorf("nil annotations: %q", got)
	}
}

// The patch removes exactly the keys (a merge patch's null) and names
// nothing else of the Node.
func TestRemovalPatch(t *testing.T) {
	var got map[string]any
	if err := json.Unmarshal(RemovalPatch([]string{"podnet.io/a", "podnet.io/b"}), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"metadata": map[string]any{"annotations": map[string]any{"podnet.io/a": nil, "podnet.io/b": nil}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%v, want %v", got, want)
	}
}
