package skel

import (
	"path/filepath"
	"regexp"
	"strings"
	"unicode"

	"github.com/podnet/podnet/cni"
)

// need says which variables a command requires. CNI_NETNS is optional
// for DEL: the namespace may be gone, and DEL must still succeed.
var need = map[string]struct{ containerID, netns, ifName, path bool }{
	"ADD":     {true, true, true, true},
	"CHECK":   {true, true, true, true},
	"DEL":     {true, false, true, true},
	"GC":      {false, false, false, true},
	"STATUS":  {false, false, false, true},
	"VERSION": {},
}

// containerIDPattern is the specification's rule for container IDs.
var containerIDPattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)

// maxIfNameLen is IFNAMSIZ less the terminating NUL.
const maxIfNameLen = 15

func envError(format string, args ...any) error {
	return cni.Errorf(cni.CodeInvalidEnvironment, format, args...)
}

// parseEnv reads and validates the CNI_* variables that cmd uses, and
// ignores the others.
func parseEnv(cmd string, getenv func(string) string) (*CmdArgs, error) {
	if cmd == "" {
		return nil, envError("CNI_COMMAND is not set")
	}
	req, ok := need[cmd]
	if !ok {
		return nil, envError("CNI_COMMAND %q is not a CNI command (ADD, DEL, CHECK, STATUS, GC, VERSION)", cmd)
	}
	args := &CmdArgs{Command: cmd}
	if cmd == "VERSION" {
		return args, nil
	}
	if req.path {
		for _, d := range filepath.SplitList(getenv("CNI_PATH")) {
			if d != "" {
				args.Path = append(args.Path, d)
			}
		}
		if len(args.Path) == 0 {
			return nil, envError("CNI_PATH is not set")
		}
	}
	if !req.containerID { // GC and STATUS: nothing per container
		return args, nil
	}
	args.ContainerID = getenv("CNI_CONTAINERID")
	if err := validateContainerID(args.ContainerID); err != nil {
		return nil, err
	}
	args.IfName = getenv("CNI_IFNAME")
	if err := validateIfName(args.IfName); err != nil {
		return nil, err
	}
	args.Netns = getenv("CNI_NETNS")
	if req.netns && args.Netns == "" {
		return nil, envError("CNI_NETNS is not set")
	}
	args.Args = getenv("CNI_ARGS")
	pairs, err := cni.ParseArgs(args.Args)
	if err != nil {
		return nil, err // already a code-4 error naming CNI_ARGS
	}
	args.ArgsPairs = pairs
	return args, nil
}

func validateContainerID(id string) error {
	if id == "" {
		return envError("CNI_CONTAINERID is not set")
	}
	if !containerIDPattern.MatchString(id) {
		return envError("CNI_CONTAINERID %q is invalid: letters, digits, '_', '.' and '-', starting with a letter or digit", id)
	}
	return nil
}

func validateIfName(name string) error {
	switch {
	case name == "":
		return envError("CNI_IFNAME is not set")
	case len(name) > maxIfNameLen:
		return envError("CNI_IFNAME %q is longer than %d bytes", name, maxIfNameLen)
	case name == "." || name == "..":
		return envError("CNI_IFNAME %q is not a valid interface name", name)
	case strings.ContainsAny(name, "/:"):
		return envError("CNI_IFNAME %q contains '/' or ':'", name)
	case strings.ContainsFunc(name, unicode.IsSpace):
		return envError("CNI_IFNAME %q contains white space", name)
	}
	return nil
}
