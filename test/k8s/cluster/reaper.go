package cluster

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The reaper tears a cluster down when the test process dies without
// doing it: go test's -timeout panic, a SIGKILL, a crash. Cleanups do not
// run then, and the components would run on: a parent-death signal does
// not help, as Go's Pdeathsig follows the thread that started the child,
// not the process, and the shims and containers are not the harness's
// children anyway.
//
// It is the test binary again (like etcd), started with Start, in a
// process group of its own so that a ^C to the test does not reach it.
// The test writes to its stdin, one JSON object a line, what it would
// have to clean: the cluster's directory, namespaces, cgroup root and
// sysctls, and every component's PID with its start time. When the
// stdin closes without a final {"done":true} (the test process is gone,
// the kernel closed its end), the reaper kills every process of the
// cluster and removes what it made. After a normal teardown the test
// sends done and the reaper exits at once.

// reaperRoleEnv, set in the environment of a re-executed test binary,
// makes MaybeRunReaper run the reaper.
const reaperRoleEnv = "PODNET_K8S_REAPER"

// reaperMsg is one line to the reaper: fields set are added to (Procs)
// or replace (the others) what it knows.
type reaperMsg struct {
	Dir             string            `json:"dir,omitempty"`
	ContainerdSocks []string          `json:"containerdSocks,omitempty"`
	CgroupRoots     []string          `json:"cgroupRoots,omitempty"`
	NetNS           []string          `json:"netns,omitempty"` // names
	HostDirs        []string          `json:"hostDirs,omitempty"`
	Sysctls         map[string]string `json:"sysctls,omitempty"`
	Procs           []procID          `json:"procs,omitempty"`
	Done            bool              `json:"done,omitempty"`
}

// procID names a process for good: a PID with the process's start time
// (clock ticks after boot), which a later process with the same PID
// does not share.
type procID struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// procStart reads the start time of process pid from /proc.
func procStart(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command", pid)
	}
	// Fields after the command start with the state, field 3; the start
	// time is field 22.
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// reaper is the test's end of the pipe to the reaper process.
type reaper struct {
	mu  sync.Mutex
	w   *os.File
	cmd *exec.Cmd
}

// startReaper starts the reaper; its messages go to the test's stderr.
func startReaper() (*reaper, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), reaperRoleEnv+"=1")
	cmd.Stdin, cmd.Stderr = r, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("start the reaper: %w", err)
	}
	return &reaper{w: w, cmd: cmd}, nil
}

// send tells the reaper m. A reaper that is gone cannot be told; the
// error is the test's to report at teardown, through done.
func (r *reaper) send(m reaperMsg) {
	if r == nil {
		return
	}
	b, _ := json.Marshal(m)
	r.mu.Lock()
	defer r.mu.Unlock()
	_, _ = r.w.Write(append(b, '\n'))
}

// done tells the reaper that the teardown ran, and waits for it to exit.
func (r *reaper) done() error {
	if r == nil {
		return nil
	}
	r.send(reaperMsg{Done: true})
	r.w.Close()
	exited := make(chan error, 1)
	go func() { exited <- r.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			return fmt.Errorf("reaper: %w", err)
		}
		return nil
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Kill()
		return fmt.Errorf("reaper (pid %d) did not exit after done; killed", r.cmd.Process.Pid)
	}
}

// reaperPlan is what the cluster has made so far that a teardown would
// undo: its directory (with the nodes' mount namespaces and CNI state),
// namespaces, containerd sockets, cgroup roots, the sysctls to restore
// and the machine directories made as mount points.
func (c *Cluster) reaperPlan() reaperMsg {
	m := reaperMsg{Dir: c.Dir, Sysctls: c.sysctls, HostDirs: c.newHostDirs}
	for _, n := range c.Nodes {
		m.NetNS = append(m.NetNS, n.netnsName)
		m.ContainerdSocks = append(m.ContainerdSocks, n.containerdSock)
		if n.cgroupRoot != "" {
			m.CgroupRoots = append(m.CgroupRoots, n.cgroupRoot)
		}
	}
	if c.OutsideNetNS != "" {
		m.NetNS = append(m.NetNS, c.OutsideNetNS)
	}
	return m
}

// noteProc tells the reaper about a process just started, and what the
// cluster has made so far that a teardown would undo.
func (c *Cluster) noteProc(p *proc) {
	m := c.reaperPlan()
	pid := p.cmd.Process.Pid
	if start, err := procStart(pid); err == nil {
		m.Procs = []procID{{PID: pid, Start: start}}
	}
	c.reaper.send(m)
}

// MaybeRunReaper runs the reaper and exits when the process was started
// as one; otherwise it returns at once. Call it first in TestMain.
func MaybeRunReaper() {
	if os.Getenv(reaperRoleEnv) == "" {
		return
	}
	plan, done := readPlan(os.Stdin)
	if done || plan.Dir == "" {
		os.Exit(0)
	}
	start := time.Now()
	fmt.Fprintf(os.Stderr, "podnet-k8s reaper: the test process ended without tearing down its cluster (%s); cleaning up\n", plan.Dir)
	if err := plan.reap(); err != nil {
		fmt.Fprintf(os.Stderr, "podnet-k8s reaper: %v\n", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "podnet-k8s reaper: %s cleaned up in %s\n", plan.Dir, time.Since(start).Round(time.Millisecond))
	os.Exit(0)
}

// readPlan reads messages until the end of in, and reports whether the
// last said done.
func readPlan(in io.Reader) (*reaperMsg, bool) {
	plan := &reaperMsg{}
	s := bufio.NewScanner(in)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		var m reaperMsg
		if json.Unmarshal(s.Bytes(), &m) != nil {
			continue
		}
		if m.Done {
			return plan, true
		}
		plan.Procs = append(plan.Procs, m.Procs...)
		if m.Dir != "" {
			plan.Dir = m.Dir
		}
		if m.ContainerdSocks != nil {
			plan.ContainerdSocks = m.ContainerdSocks
		}
		if m.CgroupRoots != nil {
			plan.CgroupRoots = m.CgroupRoots
		}
		if m.NetNS != nil {
			plan.NetNS = m.NetNS
		}
		if m.Sysctls != nil {
			plan.Sysctls = m.Sysctls
		}
		if m.HostDirs != nil {
			plan.HostDirs = m.HostDirs
		}
	}
	return plan, false
}
