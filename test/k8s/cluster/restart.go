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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// RestartComponent stops the first node's component called name
// (containerd or kubelet) with SIGTERM, starts it again and waits until it is up.
func (c *Cluster) RestartComponent(name string) error {
	p, err := c.component(name)
	if err != nil {
		return err
	}
	if err := p.stop(30 * time.Second); err != nil {
		return err
	}
	return c.StartComponent(name)
}

// KillComponent sends SIGKILL to the component called name and waits for
// it to exit: a crash, with no chance to clean up.
func (c *Cluster) KillComponent(name string) error {
	p, err := c.component(name)
	if err != nil {
		return err
	}
	if p.exited() {
		return fmt.Errorf("%s (pid %d) had already exited: %v", name, p.cmd.Process.Pid, p.err)
	}
	if err := p.cmd.Process.Kill(); err != nil {
		return err
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s (pid %d) survived SIGKILL", name, p.cmd.Process.Pid)
	}
}

// StartComponent starts the component called name again after it has
// exited, with its former command line, and waits until it is up.
func (c *Cluster) StartComponent(name string) error {
	old, err := c.component(name)
	if err != nil {
		return err
	}
	if !old.exited() {
		return fmt.Errorf("%s (pid %d) is still running", name, old.cmd.Process.Pid)
	}
	up, err := c.upCheck(name)
	if err != nil {
		return err
	}
	p, err := old.again()
	if err != nil {
		return err
	}
	c.noteProc(p)
	// Same place in the start order: teardown stops it where it stopped
	// the old one.
	for i := range c.procs {
		if c.procs[i] == old {
			c.procs[i] = p
		}
	}
	c.byName[name] = p
	return c.waitFor(name, upTimeout, up)
}

func (c *Cluster) component(name string) (*proc, error) {
	p := c.byName[name]
	if p == nil {
		return nil, fmt.Errorf("no component %q", name)
	}
	return p, nil
}

// upCheck returns the condition that says the component is up again.
func (c *Cluster) upCheck(name string) (func() error, error) {
	switch name {
	case "containerd":
		// CRI answers, and its runtime and network are ready (it has read
		// the CNI config podnet installed).
		return func() error {
			conds, err := runtimeStatus(c.Nodes[0].containerdSock)
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
		return c.kubeletUp, nil
	}
	return nil, fmt.Errorf("restarting %s is not supported", name)
}

// kubeletUp holds once kubelet's health endpoint answers and the node is
// Ready in a status kubelet posted after it started.
func (c *Cluster) kubeletUp() error {
	resp, err := c.HTTPClient(5 * time.Second).Get("http://127.0.0.1:10248/healthz")
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
	n, err := c.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	started := c.byName["kubelet"].started
	for _, cond := range n.Status.Conditions {
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

// OrphanShims returns the shims of this cluster's containerd (PID -> task
// ID) whose task containerd no longer knows of as a container or a
// sandbox. containerd 1.6 killed while it creates a sandbox forgets the
// sandbox's task after its restart, but the shim it had started runs on.
func (c *Cluster) OrphanShims(ctx context.Context) (map[int]string, error) {
	conn, rs, err := c.criConn()
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
	for _, pid := range shimPIDs(c.Nodes[0].containerdSock) {
		if id := shimTask(pid); id != "" && !known[id] {
			out[pid] = id
		}
	}
	return out, nil
}

// KillShim kills a shim of this cluster's containerd by its PID.
func (c *Cluster) KillShim(pid int) error {
	if !slices.Contains(shimPIDs(c.Nodes[0].containerdSock), pid) {
		return fmt.Errorf("pid %d is not a shim of this cluster's containerd", pid)
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
