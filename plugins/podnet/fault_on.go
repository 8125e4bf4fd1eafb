//go:build podnetfault

package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/podnet/podnet/netns"
)

// Fault injection for tests, in binaries built with -tags podnetfault
// only. At the step named by PODNET_FAULT_AT the plugin kills its
// process group with SIGKILL, as a runtime does at a timeout (the IPAM,
// which may be running at that step, is in the group): no deferred
// function and no rollback runs. The plugin must be its group's leader,
// as a runtime starts it. At the step named by
// PODNET_FAULT_UNMOUNT_AT it removes the named namespace CNI_NETNS (as
// a runtime tearing the sandbox down would) and carries on. At the step
// named by PODNET_FAULT_EXEC_AT it runs PODNET_FAULT_EXEC (a command and
// its arguments, split at spaces), as another writer racing the plugin,
// and carries on.
func faultPoint(step, netnsPath string) {
	if os.Getenv("PODNET_FAULT_EXEC_AT") == step {
		argv := strings.Fields(os.Getenv("PODNET_FAULT_EXEC"))
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "fault: %v: %v: %s\n", argv, err, out)
		}
	}
	if os.Getenv("PODNET_FAULT_UNMOUNT_AT") == step && strings.HasPrefix(netnsPath, netns.RunDir+"/") {
		if err := netns.DeleteNamed(strings.TrimPrefix(netnsPath, netns.RunDir+"/")); err != nil {
			fmt.Fprintf(os.Stderr, "fault: unmount %s: %v\n", netnsPath, err)
		}
	}
	if os.Getenv("PODNET_FAULT_AT") == step {
		fmt.Fprintf(os.Stderr, "fault: killed at step %s\n", step)
		if syscall.Getpgrp() == os.Getpid() {
			_ = syscall.Kill(0, syscall.SIGKILL)
		}
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}
