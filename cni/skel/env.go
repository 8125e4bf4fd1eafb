package skel

import (
	"path/filepath"

	"github.com/podnet/podnet/cni"
)

// need says which variables a command requires. CNI_NETNS is optional
// for DEL: the namespace may be gone, and DEL must still succeed.
var need = map[cni.Verb]struct{ containerID, netns, ifName, path bool }{
	cni.VerbAdd:     {true, true, true, true},
	cni.VerbCheck:   {true, true, true, true},
	cni.VerbDel:     {true, false, true, true},
	cni.VerbGC:      {false, false, false, true},
	cni.VerbStatus:  {false, false, false, true},
	cni.VerbVersion: {},
}

func envError(format string, args ...any) error {
	return cni.Errorf(cni.CodeInvalidEnvironment, format, args...)
}

// parseEnv reads and validates the CNI_* variables that cmd uses, and
// ignores the others.
func parseEnv(cmd cni.Verb, getenv func(string) string) (*CmdArgs, error) {
	if cmd == "" {
		return nil, envError("CNI_COMMAND is not set")
	}
	req, ok := need[cmd]
	if !ok {
		return nil, envError("CNI_COMMAND %q is not a CNI command (ADD, DEL, CHECK, STATUS, GC, VERSION)", cmd)
	}
	args := &CmdArgs{Command: cmd}
	if cmd == cni.VerbVersion {
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
	if err := cni.ValidateContainerID(id); err != nil {
		return envError("CNI_CONTAINERID: %v", err)
	}
	return nil
}

func validateIfName(name string) error {
	if name == "" {
		return envError("CNI_IFNAME is not set")
	}
	if err := cni.ValidateIfName(name); err != nil {
		return envError("CNI_IFNAME: %v", err)
	}
	return nil
}
