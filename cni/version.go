package cni

import (
	"fmt"
	"strconv"
	"strings"
)

// CurrentVersion is the newest CNI specification version podnet speaks.
const CurrentVersion = "1.1.0"

// SupportedVersions lists every specification version podnet can read and
// write, oldest first.
var SupportedVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// VersionInfo is the document a plugin prints for the VERSION command.
type VersionInfo struct {
	CNIVersion        string   `json:"cniVersion"`
	SupportedVersions []string `json:"supportedVersions,omitempty"`
}

// Supports reports whether the plugin supports version v.
func (vi *VersionInfo) Supports(v string) bool {
	for _, s := range vi.SupportedVersions {
		if s == v {
			return true
		}
	}
	return false
}

// semver is a parsed major.minor.patch version.
type semver [3]int

// parseVersion parses "major.minor.patch" (patch optional, as 0.1 was
// written without it).
func parseVersion(v string) (semver, error) {
	var out semver
	parts := strings.Split(v, ".")
	if v == "" || len(parts) < 2 || len(parts) > 3 {
		return out, fmt.Errorf("invalid version %q: want major.minor.patch", v)
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || (len(p) > 1 && p[0] == '0') {
			return out, fmt.Errorf("invalid version %q: %q is not a number", v, p)
		}
		out[i] = n
	}
	return out, nil
}

// CompareVersions returns -1, 0 or +1 as a is older than, equal to or
// newer than b. Unparseable versions are an error.
func CompareVersions(a, b string) (int, error) {
	va, err := parseVersion(a)
	if err != nil {
		return 0, err
	}
	vb, err := parseVersion(b)
	if err != nil {
		return 0, err
	}
	for i := range va {
		switch {
		case va[i] < vb[i]:
			return -1, nil
		case va[i] > vb[i]:
			return 1, nil
		}
	}
	return 0, nil
}

// AtLeast reports whether version v is at least min. An unparseable
// version is never at least anything.
func AtLeast(v, min string) bool {
	c, err := CompareVersions(v, min)
	return err == nil && c >= 0
}

// IsSupportedVersion reports whether podnet reads and writes version v.
func IsSupportedVersion(v string) bool {
	for _, s := range SupportedVersions {
		if s == v {
			return true
		}
	}
	return false
}

// CheckVersion returns a CNI error with code 1 when v is not a version
// podnet supports.
func CheckVersion(v string) error {
	if IsSupportedVersion(v) {
		return nil
	}
	if _, err := parseVersion(v); err != nil {
		return Errorf(CodeIncompatibleVersion, "cniVersion %q is not a valid version", v)
	}
	return Errorf(CodeIncompatibleVersion, "cniVersion %q is not supported (supported: %s)", v, strings.Join(SupportedVersions, ", "))
}
