package cluster

import (
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// etcdRoleEnv, set in the environment of a re-executed test binary, makes
// MaybeRunEtcd run an etcd member instead of the tests. etcd runs as a
// process of its own so that it lives in the node's network namespace
// (with kube-apiserver; every node's agent and plugins reach it at
// EtcdEndpoint) and is stopped by its PID like every other component.
const etcdRoleEnv = "PODNET_K8S_ETCD_DIR"

// etcdPeerPort is on the first node's loopback: etcd has one member.
const etcdPeerPort = 2380

// MaybeRunEtcd runs the embedded etcd server and exits when the process
// was started as the harness's etcd; otherwise it returns at once. Call it
// first in TestMain.
func MaybeRunEtcd() {
	dir := os.Getenv(etcdRoleEnv)
	if dir == "" {
		return
	}
	if err := runEtcd(dir); err != nil {
		fmt.Fprintln(os.Stderr, "etcd:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runEtcd(dir string) error {
	cfg := embed.NewConfig()
	cfg.Name = "podnet-k8s"
	cfg.Dir = dir
	client := url.URL{Scheme: "http", Host: EtcdEndpoint}
	peer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", etcdPeerPort)}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.LogLevel = "error"
	// A test cluster does not survive power loss; fsync only slows it.
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return err
	case <-time.After(60 * time.Second):
		return fmt.Errorf("not ready after 60s")
	}
	fmt.Fprintln(os.Stderr, "etcd: ready on", client.String())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
		return nil
	case err := <-e.Err():
		return err
	}
}
