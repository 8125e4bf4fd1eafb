package cni

import (
	"regexp"
	"strings"
	"testing"
)

// isIdentifier agrees with the specification's pattern.
func TestIsIdentifier(t *testing.T) {
	pattern := regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)
	for _, s := range []string{"", "a", "A0", "0a", "a_b.c-d", "_a", ".a", "-a", "a b", "a/b", "é", "a\n", "ab\x00", "net-1.2_x", strings.Repeat("z", 300)} {
		if got, want := isIdentifier(s), pattern.MatchString(s); got != want {
			t.Errorf("isIdentifier(%q) = %v, the pattern says %v", s, got, want)
		}
	}
}

func FuzzIsIdentifier(f *testing.F) {
	pattern := regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)
	f.Add("a-b")
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := isIdentifier(s), pattern.MatchString(s); got != want {
			t.Errorf("isIdentifier(%q) = %v, the pattern says %v", s, got, want)
		}
	})
}
