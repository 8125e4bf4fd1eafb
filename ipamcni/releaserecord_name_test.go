package ipamcni

import "testing"

// recordName is the regexp ^[A-Za-z0-9][A-Za-z0-9_.\-]*$ it replaced.
func TestRecordName(t *testing.T) {
	for h, want := range map[string]bool{
		"podnet.abc123": true, "a": true, "A-b_c.d": true, "9": true,
		"": false, ".x": false, "-x": false, "_x": false, "a/b": false, "a b": false, "a\x00": false, "é": false, "a..": true,
	} {
		if got := recordName(h); got != want {
			t.Errorf("recordName(%q) = %v, want %v", h, got, want)
		}
	}
}
