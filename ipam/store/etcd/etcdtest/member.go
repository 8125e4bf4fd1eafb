package etcdtest

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/podnet/podnet/internal/etcdbin"
)

// startMember starts member i's process; state is etcd's
// --initial-cluster-state (new, or existing for a restart). It returns
// once the process runs: waitReady waits for it to serve.
func (c *Cluster) startMember(i int, state string) {
	c.t.Helper()
	m := c.members[i]
	logf, err := os.OpenFile(m.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatalf("etcdtest: %v", err)
	}
	defer logf.Close()
	cmd := exec.Command(c.bin, append(m.flags, "--initial-cluster-state="+state)...)
	cmd.Env = append(os.Environ(), etcdbin.EnvStdinLifetime+"=1", etcdbin.EnvReadyURL+"="+m.metrics+"/health")
	cmd.Stderr = logf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		c.t.Fatalf("etcdtest: %v", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatalf("etcdtest: %v", err)
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("etcdtest: start %s: %v", m.name, err)
	}
	m.cmd, m.stdin, m.exited = cmd, stdin, make(chan struct{})
	ready := make(chan struct{})
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		if strings.TrimSpace(line) == "ready" {
			close(ready)
		}
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
		close(m.exited)
	}()
	m.ready = ready
}

func (c *Cluster) waitReady(i int) {
	c.t.Helper()
	m := c.members[i]
	select {
	case <-m.ready:
	case <-m.exited:
		c.t.Fatalf("etcdtest: %s exited: %s", m.name, c.logTail(m))
	case <-time.After(60 * time.Second):
		c.t.Fatalf("etcdtest: %s not ready after 60s: %s", m.name, c.logTail(m))
	}
}

func (c *Cluster) logTail(m *member) string {
	data, _ := os.ReadFile(m.log)
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(data)
}

// Endpoints returns the client URLs of the running members.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.members {
		if m.cmd != nil {
			eps = append(eps, m.client)
		}
	}
	return eps
}

// AllEndpoints returns the client URLs of every member, running or not:
// what a client configured with the whole cluster holds.
func (c *Cluster) AllEndpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.client)
	}
	return eps
}

// Leader returns the index of the running member that leads the cluster,
// or -1 while none does (or none can say): each member's metrics say
// whether it leads.
func (c *Cluster) Leader() int {
	hc := &http.Client{Timeout: 2 * time.Second}
	for i, m := range c.members {
		if m.cmd == nil {
			continue
		}
		resp, err := hc.Get(m.metrics + "/metrics")
		if err != nil {
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && strings.Contains(string(body), "\netcd_server_is_leader 1\n") {
			return i
		}
	}
	return -1
}

// Running reports whether member i is running.
func (c *Cluster) Running(i int) bool { return c.members[i].cmd != nil }

// stopTimeout bounds a member's shutdown: one that has not exited after
// SIGTERM by then is killed, and the test is told.
const stopTimeout = 30 * time.Second

// Stop stops member i (SIGTERM: etcd shuts down cleanly); its data stays
// for Restart.
func (c *Cluster) Stop(i int) {
	m := c.members[i]
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(stopTimeout):
		c.t.Errorf("etcdtest: %s did not stop in %s after SIGTERM; killed", m.name, stopTimeout)
		_ = m.cmd.Process.Kill()
		<-m.exited
	}
	m.stdin.Close()
	m.cmd = nil
}

// Restart starts a stopped member i again and waits until it is ready.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.startMember(i, "existing")
	c.waitReady(i)
}

func (c *Cluster) stopAll() {
	for i := range c.members {
		c.Stop(i)
	}
}
