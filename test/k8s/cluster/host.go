package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// kubeletSysctls are the machine-wide sysctls kubelet sets at start
// (setupKernelTunables): none is per network namespace, so the harness
// records them before kubelet runs and writes them back after.
var kubeletSysctls = []string{
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
}

func readSysctls() (map[string]string, error) {
	m := map[string]string{}
	for _, k := range kubeletSysctls {
		v, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			return nil, err
		}
		m[k] = strings.TrimSpace(string(v))
	}
	return m, nil
}

func restoreSysctls(saved map[string]string) error {
	var errs []error
	now, err := readSysctls()
	if err != nil {
		return err
	}
	for k, v := range saved {
		if now[k] == v {
			continue
		}
		if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0); err != nil {
			errs = append(errs, fmt.Errorf("restore sysctl %s=%s: %w", k, v, err))
		}
	}
	return errors.Join(errs...)
}

// lockHostDirs takes a shared lock that every running cluster holds on
// the machine's hostDirs, from before it looks for them until its
// teardown. Removing a directory that is a mount point in another mount
// namespace detaches that mount there (Linux 3.18 and later): a cluster
// that made /opt/cni/bin and removed it at its end, while another
// cluster ran, took the other's nodes' /opt/cni/bin bind mounts away
// (their plugins vanished mid-test). So restoreHost removes them only
// when it can take the lock exclusively: no other cluster runs.
func lockHostDirs() (*os.File, error) {
	dir, err := CacheDir()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, "host-dirs.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return f, nil
}

// soleCluster reports whether no other cluster holds the hostDirs lock
// (then this one holds it exclusively until it closes it).
func soleCluster(lock *os.File) bool {
	return lock != nil && unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil
}

// absentHostDirs returns the hostDirs that do not exist yet: those the
// cluster will make as mount points of the nodes' own directories, for
// restoreHost to remove again if empty.
func absentHostDirs() []string {
	var dirs []string
	for _, d := range hostDirs {
		if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// removeEmptyTree removes dir if it holds nothing but empty directories.
func removeEmptyTree(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.IsDir() {
			return fmt.Errorf("%s is not empty", dir)
		}
		if err := removeEmptyTree(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return os.Remove(dir)
}

// cgroupMounts returns the mount points of the cgroup hierarchies: with
// all, the named (name=systemd) and cgroup2 ones too, where runc may also
// make a container's cgroup.
func cgroupMounts(all bool) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		sep := -1
		for i, x := range fields {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || len(fields) < sep+4 {
			continue
		}
		switch {
		case fields[sep+1] == "cgroup2" && all:
		case fields[sep+1] != "cgroup":
			continue
		case strings.Contains(fields[sep+3], "name=") && !all:
			continue
		}
		out = append(out, fields[4])
	}
	return out, s.Err()
}

// makeCgroupRoot creates /<name> in every cgroup hierarchy, kubelet's
// cgroupRoot: pods' cgroups go under it, not among the machine's. In
// cpuset it copies the parent's CPUs and memory nodes, which a new
// cpuset cgroup lacks.
func makeCgroupRoot(name string) error {
	// kubelet checks the root in every hierarchy, named ones included.
	hs, err := cgroupMounts(true)
	if err != nil {
		return err
	}
	for _, h := range hs {
		d := filepath.Join(h, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("cgroup root: %w", err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				if err := os.WriteFile(filepath.Join(d, f), v, 0); err != nil {
					return fmt.Errorf("cgroup root %s: %w", filepath.Join(d, f), err)
				}
			}
		}
	}
	return nil
}

// removeCgroupRoot removes the cgroup root makeCgroupRoot made, with
// everything below it, from every hierarchy that has it.
func removeCgroupRoot(name string) error {
	mounts, err := cgroupMounts(true)
	errs := []error{err}
	for _, m := range mounts {
		if _, err := os.Stat(filepath.Join(m, name)); err == nil {
			errs = append(errs, removeCgroupTree(filepath.Join(m, name)))
		}
	}
	return errors.Join(errs...)
}

// removeCgroupTree removes dir and the cgroups below it, deepest first.
// A cgroup with a process left in it cannot be removed; the error names
// it.
func removeCgroupTree(dir string) error {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	var errs []error
	for _, d := range dirs {
		var err error
		for range 50 {
			if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
				err = nil
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			procs, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			errs = append(errs, fmt.Errorf("remove cgroup %s (processes %q): %w", d, strings.Fields(string(procs)), err))
		}
	}
	return errors.Join(errs...)
}

// mountsUnder returns the mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, s.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountUnder detaches every mount at or below dir (kubelet's volume
// tmpfs, containerd's rootfs overlays, left when something was killed).
func unmountUnder(dir string) error {
	mps, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, mp := range mps {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", mp, err))
		}
	}
	return errors.Join(errs...)
}

// shimPIDs returns the PIDs of containerd-shim-runc-v2 processes started
// for the containerd at address: shims outlive containerd by design, and
// their command line names the containerd they serve.
func shimPIDs(address string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cl, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cl), "\x00")
		if len(args) == 0 || !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		for i, a := range args {
			if a == "-address" && i+1 < len(args) && args[i+1] == address {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}
