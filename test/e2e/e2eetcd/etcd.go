package e2eetcd

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/test/e2e/e2enet"
)

// A test binary started with these variables set (inside the underlay's
// namespace) runs one embedded etcd member until its stdin closes, which
// also happens when the test process dies.
const (
	envEtcdListen = "PODNET_E2E_ETCD_LISTEN"
	envEtcdDir    = "PODNET_E2E_ETCD_DIR"
)

// MaybeRunHelper runs the etcd member and exits when this process was
// started as the helper; otherwise it returns at once. Call it first in
// TestMain.
func MaybeRunHelper() {
	if addr := os.Getenv(envEtcdListen); addr != "" {
		os.Exit(runEtcd(addr, os.Getenv(envEtcdDir)))
	}
}

func runEtcd(addr, dir string) int {
	cfg := embed.NewConfig()
	cfg.Name = "e2e"
	cfg.Dir = dir
	client := url.URL{Scheme: "http", Host: addr}
	peer := url.URL{Scheme: "http", Host: "127.0.0.1:2380"}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.LogLevel = "error"
	cfg.UnsafeNoFsync = true
	// The JSON gateway stays on: podnet-ipam, in process in the podnet
	// plugin, talks to etcd through it. Its own dial to the client URL
	// starts in this process, inside the hub's namespace.
	cfg.TickMs, cfg.ElectionMs = 10, 100
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd:", err)
		return 1
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "etcd:", err)
		return 1
	case <-time.After(60 * time.Second):
		fmt.Fprintln(os.Stderr, "etcd: not ready after 60s")
		return 1
	}
	fmt.Println("ready")
	go func() {
		for err := range e.Err() {
			fmt.Fprintln(os.Stderr, "etcd:", err)
		}
	}()
	_, _ = io.Copy(io.Discard, os.Stdin) // until the test closes it or dies
	return 0
}

// startEtcd runs the helper inside u's hub namespace, listening on
// u.Server:2379, and returns its endpoint.
func startEtcd(t testing.TB, u *e2enet.Underlay) string {
	t.Helper()
	addr := net.JoinHostPort(u.Server.String(), "2379")
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), envEtcdListen+"="+addr, envEtcdDir+"="+t.TempDir())
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
			t.Fatalf("etcd helper: %q, stderr: %s (does the test binary's TestMain call e2eetcd.MaybeRunHelper first?)", line, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("etcd helper not ready after 60s; stderr: %s", stderr.String())
	}
	return addr
}
