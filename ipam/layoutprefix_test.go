package ipam

import "testing"

// versionedPrefix is the regexp ^(.*/)v([0-9]+)/$ it replaced.
func TestVersionedPrefix(t *testing.T) {
	for _, c := range []struct {
		in   string
		base string
		n    int
		ok   bool
	}{
		{"/podnet/v2/", "/podnet/", 2, true},
		{"/a/v2/x/v13/", "/a/v2/x/", 13, true},
		{"/v0/", "/", 0, true},
		{"v2/", "", 0, false},
		{"/podnet/v2", "", 0, false},
		{"/podnet/v/", "", 0, false},
		{"/podnet/v2a/", "", 0, false},
		{"/podnet/x2/", "", 0, false},
		{"/podnet/", "", 0, false},
		{"", "", 0, false},
		{"/p/v99999999999999999999999/", "", 0, false},
	} {
		base, n, ok := versionedPrefix(c.in)
		if base != c.base || n != c.n || ok != c.ok {
			t.Errorf("versionedPrefix(%q) = %q, %d, %v; want %q, %d, %v", c.in, base, n, ok, c.base, c.n, c.ok)
		}
	}
}
