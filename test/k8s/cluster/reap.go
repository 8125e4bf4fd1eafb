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

	"github.com/vishvananda/netlink"

	"github.com/podnet/podnet/dataplane/tag"
	"github.com/podnet/podnet/netns"
)

// reap undoes what the plan's cluster made, without its API or CRI: the
// test process that could have used them is gone, and so may be the
// components. Processes first (components by PID, the shims of its
// containerd, everything in its cgroup root), then the pods' CNI cache
// entries, mounts (the pods' network namespaces among them), the
// directory, the cgroup root, the sysctls, and last the node's
// namespaces.
func (plan *reaperMsg) reap() error {
	var errs []error
	for i := len(plan.Procs) - 1; i >= 0; i-- {
		p := plan.Procs[i]
		if start, err := procStart(p.PID); err == nil && start == p.Start {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
	}
	if plan.ContainerdSock != "" {
		for _, pid := range shimPIDs(plan.ContainerdSock) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if plan.CgroupRoot != "" {
		errs = append(errs, killCgroupTree(plan.CgroupRoot))
	}
	if len(plan.NetNS) > 0 {
		errs = append(errs, reapCNICache(netns.NamedPath(plan.NetNS[0])))
	}
	if plan.Dir != "" {
		errs = append(errs, unmountUnder(plan.Dir))
		if left, _ := mountsUnder(plan.Dir); len(left) == 0 {
			errs = append(errs, os.RemoveAll(plan.Dir))
		}
	}
	if plan.CgroupRoot != "" {
		errs = append(errs, removeCgroupRoot(plan.CgroupRoot))
	}
	if plan.Sysctls != nil {
		errs = append(errs, restoreSysctls(plan.Sysctls))
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

// reapCNICache removes the machine's CNI cache entries (libcni's,
// shared by every runtime on the machine) of the node's pods: those of
// the container IDs its veths name. The pods' network namespaces are
// pinned under the cluster's directory and go with it.
func reapCNICache(nodeNS string) error {
	var ids []string
	err := netns.Do(nodeNS, func() error {
		links, err := netlink.LinkList()
		for _, l := range links {
			if o, ok := tag.ParseAlias(l.Attrs().Alias); ok {
				ids = append(ids, o.ContainerID)
			}
		}
		return err
	})
	errs := []error{err}
	for _, id := range ids {
		for _, f := range CNICacheEntries(id) {
			errs = append(errs, os.Remove(f))
		}
	}
	return errors.Join(errs...)
}
