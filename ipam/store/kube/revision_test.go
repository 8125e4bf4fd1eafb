package kube

import (
	"fmt"
	"testing"
)

// TestRevisions: resourceVersions are opaque strings. Canonical decimal
// ones below opaqueBase are their own tokens; every other one gets a
// token of its own for its object; a token gives back the very string,
// for its object only, while it is remembered.
func TestRevisions(t *testing.T) {
	var r revisions
	for rv, want := range map[string]int64{"1": 1, "42": 42, "4611686018427387903": opaqueBase - 1} {
		if got := r.token("ipamblocks/b", rv); got != want {
			t.Errorf("token(%q) = %d, want %d", rv, got, want)
		}
		if got, ok := r.resourceVersion("ipamblocks/other", want); !ok || got != rv {
			t.Errorf("resourceVersion(%d) = %q %v, want %q", want, got, ok, rv)
		}
	}
	seen := map[int64]string{}
	for _, rv := range []string{"0", "007", "+5", "-3", "1e3", "abc", "4611686018427387904", "99999999999999999999", "AAAx/ZmM=", " 1"} {
		tok := r.token("ipamblocks/b", rv)
		if tok < opaqueBase {
			t.Errorf("token(%q) = %d, want an opaque token", rv, tok)
		}
		if prev, dup := seen[tok]; dup {
			t.Errorf("token(%q) = token(%q) = %d", rv, prev, tok)
		}
		seen[tok] = rv
		if again := r.token("ipamblocks/b", rv); again != tok {
			t.Errorf("token(%q) again = %d, want %d", rv, again, tok)
		}
		if got, ok := r.resourceVersion("ipamblocks/b", tok); !ok || got != rv {
			t.Errorf("resourceVersion(%d) = %q %v, want %q", tok, got, ok, rv)
		}
		if _, ok := r.resourceVersion("ipamblocks/c", tok); ok {
			t.Errorf("the token of %q on ipamblocks/b is valid on ipamblocks/c", rv)
		}
		if other := r.token("ipamblocks/c", rv); other == tok {
			t.Errorf("%q has the same token on two objects", rv)
		}
	}
	for _, tok := range []int64{0, -1, opaqueBase + 1<<40} {
		if rv, ok := r.resourceVersion("ipamblocks/b", tok); ok {
			t.Errorf("resourceVersion(%d) = %q, want none", tok, rv)
		}
	}
}

// Opaque tokens are remembered for at least genSize newer ones; one in
// use (seen again, or written at) is kept; a forgotten one is never
// handed out again for another string.
func TestRevisionsForget(t *testing.T) {
	var r revisions
	kept := r.token("ipamnodes/n", "kept")
	lost := r.token("ipamnodes/n", "lost")
	for i := range 2 * genSize {
		r.token("ipamblocks/b", fmt.Sprint("v", i))
		if i%(genSize/2) == 0 {
			if _, ok := r.resourceVersion("ipamnodes/n", kept); !ok {
				t.Fatalf("token in use forgotten after %d others", i)
			}
		}
	}
	if _, ok := r.resourceVersion("ipamnodes/n", lost); ok {
		t.Error("a token unused for 2 generations is still remembered")
	}
	if again := r.token("ipamnodes/n", "lost"); again == lost {
		t.Error("a forgotten token handed out again")
	}
}
