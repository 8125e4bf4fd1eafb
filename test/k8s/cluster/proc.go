package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// proc is a process the harness started, always in a node's network
// namespace and, for a node's kubelet and containerd, its mount namespace
// (through nsenter, which execs the program: the PID is the program's),
// logging to its own file. It is stopped by its PID only.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	// started is when it was started (a restarted component's status
	// must be newer).
	started time.Time
	done    chan struct{}
	err     error
}

// place is where a process runs: a network namespace (a path) and, when
// set, a mount namespace and a UTS namespace (files they are bound to).
type place struct {
	netNS, mountNS, utsNS string
}

func (w place) nsenterArgs() []string {
	args := []string{"--net=" + w.netNS}
	if w.mountNS != "" {
		args = append(args, "--mount="+w.mountNS)
	}
	if w.utsNS != "" {
		args = append(args, "--uts="+w.utsNS)
	}
	return args
}

func startProc(w place, logDir, name string, env []string, bin string, args ...string) (*proc, error) {
	nsArgs := append(w.nsenterArgs(), "--", bin)
	cmd := exec.Command("nsenter", append(nsArgs, args...)...)
	cmd.Env = append(os.Environ(), env...)
	return launch(name, filepath.Join(logDir, name+".log"), cmd)
}

// again starts p's command line again, with the same environment and
// log file, once p has exited.
func (p *proc) again() (*proc, error) {
	cmd := exec.Command(p.cmd.Path, p.cmd.Args[1:]...)
	cmd.Env = p.cmd.Env
	return launch(p.name, p.log, cmd)
}

func launch(name, logPath string, cmd *exec.Cmd) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group: a ^C to the test does not reach it before
	// the harness has stopped what depends on it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, started: time.Now(), done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process, then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) error {
	if p == nil || p.exited() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
		return fmt.Errorf("%s (pid %d) ignored SIGTERM for %s and was killed", p.name, p.cmd.Process.Pid, grace)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) survived SIGKILL", p.name, p.cmd.Process.Pid)
	}
}
