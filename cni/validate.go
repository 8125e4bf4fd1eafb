package cni

import (
	"fmt"
	"strings"
	"unicode"
)

// The specification's rules for identifiers, shared by the runtime (which
// refuses to call a plugin with bad ones) and by skel (which refuses to be
// called with them). The errors describe the value; callers say where it
// came from.

// isIdentifier is the spec's rule for network names and container IDs,
// ^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$, by hand: regexp would be linked into
// every plugin and compiled at each exec.
func isIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// MaxIfNameLen is the kernel's limit on interface names (IFNAMSIZ - 1).
const MaxIfNameLen = 15

// ValidateNetworkName checks a network name.
func ValidateNetworkName(name string) error {
	if !isIdentifier(name) {
		return fmt.Errorf("%q is not a valid network name (letters, digits, '_', '.', '-'; not starting with a punctuation mark)", name)
	}
	return nil
}

// ValidateContainerID checks a container ID.
func ValidateContainerID(id string) error {
	if id == "" {
		return fmt.Errorf("container ID is empty")
	}
	if !isIdentifier(id) {
		return fmt.Errorf("container ID %q is invalid: letters, digits, '_', '.' and '-', starting with a letter or digit", id)
	}
	return nil
}

// ValidateIfName checks an interface name as the kernel and the spec
// require.
func ValidateIfName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("interface name is empty")
	case len(name) > MaxIfNameLen:
		return fmt.Errorf("interface name %q is longer than %d bytes", name, MaxIfNameLen)
	case name == "." || name == "..":
		return fmt.Errorf("interface name %q is not a valid interface name", name)
	case strings.ContainsAny(name, "/:"):
		return fmt.Errorf("interface name %q contains '/' or ':'", name)
	case strings.ContainsFunc(name, unicode.IsSpace):
		return fmt.Errorf("interface name %q contains white space", name)
	}
	return nil
}
