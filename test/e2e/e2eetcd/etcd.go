package e2eetcd

import (
	"bufio"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/podnet/podnet/internal/etcdbin"
	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/test/e2e/e2enet"
)

// startEtcd runs an etcd member (internal/etcdbin's server) inside u's
// hub namespace, listening on u.Server:2379, and returns its endpoint.
func startEtcd(t testing.TB, u *e2enet.Underlay) string {
	t.Helper()
	addr := net.JoinHostPort(u.Server.String(), "2379")
	bin, err := etcdbin.Path()
	if err != nil {
		t.Fatal(err)
	}
	// The peer and metrics URLs are on the hub's own loopback. The JSON
	// gateway stays on (etcd's default): podnet-ipam, in process in the
	// podnet plugin, talks to etcd through it.
	client := "http://" + addr
	cmd := exec.Command(bin, "--name=e2e", "--data-dir="+t.TempDir(),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=e2e=http://127.0.0.1:2380", "--listen-metrics-urls=http://127.0.0.1:2381",
		"--log-level=error", "--unsafe-no-fsync", "--heartbeat-interval=10", "--election-timeout=100")
	cmd.Env = append(os.Environ(), etcdbin.EnvStdinLifetime+"=1",
		etcdbin.EnvReadyURL+"=http://127.0.0.1:2381/health")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &e2enet.SyncBuffer{}
	cmd.Stderr = stderr
	if err := netns.Do(u.Hub.Path, cmd.Start); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case line := <-ready:
		if line != "ready" {
			t.Fatalf("etcd: %q, stderr: %s", line, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("etcd not ready after 60s; stderr: %s", stderr.String())
	}
	return addr
}
