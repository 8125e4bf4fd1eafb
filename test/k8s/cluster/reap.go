package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/podnet/podnet/netns"
)

// reap undoes what the plan's cluster made, without its API or CRI: the
// test process that could have used them is gone, and so may be the
// components. Processes first (components by PID, the shims of its
// containerds, everything in its cgroup roots), then the mounts under the
// directory (the nodes' mount namespaces, and with them the pods'
// network namespaces and the nodes' CNI state), the directory, the
// cgroup roots, the sysctls, the machine directories made as mount
// points (as restoreHost does: empty ones, when no other cluster runs),
// and last the namespaces.
func (plan *reaperMsg) reap() error {
	var errs []error
	for i := len(plan.Procs) - 1; i >= 0; i-- {
		p := plan.Procs[i]
		if start, err := procStart(p.PID); err == nil && start == p.Start {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
	}
	for _, sock := range plan.ContainerdSocks {
		for _, pid := range shimPIDs(sock) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	for _, root := range plan.CgroupRoots {
		errs = append(errs, killCgroupTree(root))
	}
	if plan.Dir != "" {
		errs = append(errs, unmountUnder(plan.Dir))
		if left, _ := mountsUnder(plan.Dir); len(left) == 0 {
			errs = append(errs, os.RemoveAll(plan.Dir))
		}
	}
	for _, root := range plan.CgroupRoots {
		errs = append(errs, removeCgroupRoot(root))
	}
	if plan.Sysctls != nil {
		errs = append(errs, restoreSysctls(plan.Sysctls))
	}
	if len(plan.HostDirs) > 0 {
		if lock, err := lockHostDirs(); err == nil {
			if soleCluster(lock) {
				for i := len(plan.HostDirs) - 1; i >= 0; i-- {
					_ = removeEmptyTree(plan.HostDirs[i])
				}
			}
			lock.Close()
		}
	}
	for _, name := range plan.NetNS {
		errs = append(errs, netns.DeleteNamed(name))
	}
	return errors.Join(errs...)
}

// killCgroupTree kills every process in the cgroup root, in every
// hierarchy (kubelet puts the containers there), until none is left.
func killCgroupTree(root string) error {
	mounts, err := cgroupMounts(true)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var pids []int
		for _, m := range mounts {
			_ = filepath.WalkDir(filepath.Join(m, root), func(p string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
					return nil
				}
				b, _ := os.ReadFile(p)
				for _, f := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(f); err == nil && !slices.Contains(pids, pid) {
						pids = append(pids, pid)
					}
				}
				return nil
			})
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still in cgroup %s", pids, root)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
