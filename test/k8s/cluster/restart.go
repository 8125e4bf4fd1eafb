package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Restarting node components, by their PID, the way an administrator's
// `systemctl restart` or a crash and a supervisor's restart would: the
// same command line and environment, the same state directories. Pods
// and their shims keep running meanwhile, as on a real node.

// upTimeout is how long a restarted component has to come up. Generous:
// on a loaded machine containerd reloads every sandbox and kubelet syncs
// every pod before it reports healthy.
const upTimeout = 3 * time.Minute

// RestartComponent stops the node's component called name (containerd
// or kubelet) with SIGTERM, starts it again and waits until it is up.
func (n *Node) RestartComponent(name string) error {
	p, err := n.component(name)
	if err != nil {
		return err
	}
	if err := p.stop(30 * time.Second); err != nil {
		return err
	}
	return n.StartComponent(name)
}

// KillComponent sends SIGKILL to the node's component called name and
// waits for it to exit: a crash, with no chance to clean up.
func (n *Node) KillComponent(name string) error {
	p, err := n.component(name)
	if err != nil {
		return err
	}
	if p.exited() {
		return fmt.Errorf("%s (pid %d) had already exited: %v", p.name, p.cmd.Process.Pid, p.err)
	}
	if err := p.cmd.Process.Kill(); err != nil {
		return err
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s (pid %d) survived SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

// StartComponent starts the node's component called name again after it
// has exited, with its former command line, and waits until it is up.
func (n *Node) StartComponent(name string) error {
	old, err := n.component(name)
	if err != nil {
		return err
	}
	if !old.exited() {
		return fmt.Errorf("%s (pid %d) is still running", old.name, old.cmd.Process.Pid)
	}
	up, err := n.upCheck(name)
	if err != nil {
		return err
	}
	p, err := old.again()
	if err != nil {
		return err
	}
	c := n.c
	c.noteProc(p)
	// Same place in the start order: teardown stops it where it stopped
	// the old one.
	for i := range c.procs {
		if c.procs[i] == old {
			c.procs[i] = p
		}
	}
	c.byName[p.name] = p
	return c.waitFor(p.name, upTimeout, up)
}

// component is the node's process of the component called name.
func (n *Node) component(name string) (*proc, error) {
	p := n.c.byName[n.procName(name)]
	if p == nil {
		return nil, fmt.Errorf("no component %q on %s", name, n.Name)
	}
	return p, nil
}

// upCheck returns the condition that says the component is up again.
func (n *Node) upCheck(name string) (func() error, error) {
	switch name {
	case "containerd":
		// CRI answers, and its runtime and network are ready (it has read
		// the CNI config podnet installed).
		return func() error {
			conds, err := runtimeStatus(n.containerdSock)
			if err != nil {
				return err
			}
			for _, cond := range conds {
				if !cond.Status {
					return fmt.Errorf("containerd %s: %s %s", cond.Type, cond.Reason, cond.Message)
				}
			}
			return nil
		}, nil
	case "kubelet":
		return n.kubeletUp, nil
	}
	return nil, fmt.Errorf("restarting %s is not supported", name)
}

// kubeletUp holds once the node's kubelet's health endpoint answers and
// the node is Ready in a status kubelet posted after it started.
func (n *Node) kubeletUp() error {
	resp, err := n.HTTPClient(5 * time.Second).Get("http://127.0.0.1:10248/healthz")
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok" {
		return fmt.Errorf("kubelet healthz: %s %q", resp.Status, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	obj, err := n.Object(ctx)
	if err != nil {
		return err
	}
	started := n.c.byName[n.procName("kubelet")].started
	for _, cond := range obj.Status.Conditions {
		if cond.Type != corev1.NodeReady {
			continue
		}
		if cond.Status != corev1.ConditionTrue {
			return fmt.Errorf("node not ready: %s %s", cond.Reason, cond.Message)
		}
		if cond.LastHeartbeatTime.Time.Before(started.Truncate(time.Second)) {
			return errors.New("no node status from the new kubelet yet")
		}
		return nil
	}
	return errors.New("node has no Ready condition")
}

// OrphanShims returns the shims of the node's containerd (PID -> task
// ID) whose task containerd no longer knows of as a container or a
// sandbox. containerd 1.6 killed while it creates a sandbox forgets the
// sandbox's task after its restart, but the shim it had started runs on.
func (n *Node) OrphanShims(ctx context.Context) (map[int]string, error) {
	conn, rs, err := n.criConn()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	known := map[string]bool{}
	sbs, err := rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, err
	}
	for _, s := range sbs.Items {
		known[s.Id] = true
	}
	cs, err := rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return nil, err
	}
	for _, ct := range cs.Containers {
		known[ct.Id] = true
	}
	out := map[int]string{}
	for _, pid := range shimPIDs(n.containerdSock) {
		if id := shimTask(pid); id != "" && !known[id] {
			out[pid] = id
		}
	}
	return out, nil
}

// KillShim kills a shim of the node's containerd by its PID.
func (n *Node) KillShim(pid int) error {
	if !slices.Contains(shimPIDs(n.containerdSock), pid) {
		return fmt.Errorf("pid %d is not a shim of %s's containerd", pid, n.Name)
	}
	return syscall.Kill(pid, syscall.SIGKILL)
}

// shimTask returns the task ID a shim serves (its -id argument).
func shimTask(pid int) string {
	cl, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return ""
	}
	args := strings.Split(string(cl), "\x00")
	for i, a := range args {
		if a == "-id" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}
