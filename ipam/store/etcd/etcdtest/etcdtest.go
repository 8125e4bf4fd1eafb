// Package etcdtest starts real etcd members in-process for tests: 127.0.0.1
// only, free ports, data in t.TempDir(), logs discarded, all stopped in
// t.Cleanup. Members can be stopped and started again for fault tests.
package etcdtest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Cluster is a running etcd cluster.
type Cluster struct {
	t       testing.TB
	members []*member
}

type member struct {
	cfg *embed.Config
	e   *embed.Etcd // nil while stopped
}

// Option changes how Start configures the members.
type Option func(*embed.Config)

// WithClientTLS serves clients over TLS with this certificate and key,
// requiring client certificates signed by the CA in caFile.
func WithClientTLS(certFile, keyFile, caFile string) Option {
	return func(cfg *embed.Config) {
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: certFile, KeyFile: keyFile, TrustedCAFile: caFile, ClientCertAuth: true}
		for _, urls := range [][]url.URL{cfg.ListenClientUrls, cfg.AdvertiseClientUrls} {
			for i := range urls {
				urls[i].Scheme = "https"
			}
		}
	}
}

// Start starts an n-member cluster and waits until every member is ready.
func Start(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	dir := t.TempDir()
	c := &Cluster{t: t}
	var initial []string
	token := fmt.Sprintf("podnet-test-%d", time.Now().UnixNano())
	for i := range n {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = filepath.Join(dir, cfg.Name)
		peer, client := freeURL(t), freeURL(t)
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
		cfg.InitialClusterToken = token
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		cfg.LogLevel = "error"
		// Tests do not survive power loss; fsync would only slow them.
		cfg.UnsafeNoFsync = true
		// Shorter than the defaults (100/1000) so that fault tests elect
		// quickly, long enough not to flap on a loaded CI machine.
		cfg.TickMs, cfg.ElectionMs = 50, 1000
		for _, o := range opts {
			o(cfg)
		}
		initial = append(initial, cfg.Name+"="+peer.String())
		c.members = append(c.members, &member{cfg: cfg})
	}
	for _, m := range c.members {
		m.cfg.InitialCluster = strings.Join(initial, ",")
	}
	t.Cleanup(c.stopAll)
	// Members must start together: none is ready before a quorum is up.
	for i := range c.members {
		c.startMember(i, false)
	}
	for i := range c.members {
		c.waitReady(i)
	}
	return c
}

// freeURL is a URL on a free port of 127.0.0.1 below Linux's ephemeral
// range (32768 and up by default). A port the kernel picks (":0") is
// one it may pick again for an outgoing connection, such as a started
// member's to its peers, before the member meant for it binds it: a
// 3-member start then fails, and a member that lost its peers never
// stops (the 30-minute hang of a run beside other work).
func freeURL(t testing.TB) url.URL {
	for range 200 {
		port := 20000 + rand.IntN(12000)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l.Close()
		return url.URL{Scheme: "http", Host: l.Addr().String()}
	}
	t.Fatal("etcdtest: no free port in 20000-31999 after 200 tries")
	return url.URL{}
}

func (c *Cluster) startMember(i int, wait bool) {
	c.t.Helper()
	m := c.members[i]
	e, err := embed.StartEtcd(m.cfg)
	if err != nil {
		c.t.Fatalf("etcdtest: start %s: %v", m.cfg.Name, err)
	}
	m.e = e
	if wait {
		c.waitReady(i)
	}
}

func (c *Cluster) waitReady(i int) {
	c.t.Helper()
	m := c.members[i]
	select {
	case <-m.e.Server.ReadyNotify():
	case err := <-m.e.Err():
		c.t.Fatalf("etcdtest: %s: %v", m.cfg.Name, err)
	case <-time.After(60 * time.Second):
		c.t.Fatalf("etcdtest: %s not ready after 60s", m.cfg.Name)
	}
}

// Endpoints returns the client URLs of the running members.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.members {
		if m.e != nil {
			eps = append(eps, m.cfg.AdvertiseClientUrls[0].String())
		}
	}
	return eps
}

// AllEndpoints returns the client URLs of every member, running or not:
// what a client configured with the whole cluster holds.
func (c *Cluster) AllEndpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.cfg.AdvertiseClientUrls[0].String())
	}
	return eps
}

// Leader returns the index of the running member that leads the cluster,
// or -1 while none does.
func (c *Cluster) Leader() int {
	for i, m := range c.members {
		if m.e != nil && m.e.Server.Leader() == m.e.Server.MemberID() {
			return i
		}
	}
	return -1
}

// Running reports whether member i is running.
func (c *Cluster) Running(i int) bool { return c.members[i].e != nil }

// stopTimeout bounds a member's Close: a member that never reached its
// peers may never return from it, and a test's cleanup must not hang.
const stopTimeout = 30 * time.Second

// Stop stops member i; its data stays for Restart.
func (c *Cluster) Stop(i int) {
	m := c.members[i]
	if m.e == nil {
		return
	}
	done := make(chan struct{})
	go func() { m.e.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(stopTimeout):
		c.t.Errorf("etcdtest: %s did not stop in %s; left running", m.cfg.Name, stopTimeout)
	}
	m.e = nil
}

// Restart starts a stopped member i again and waits until it is ready.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.members[i].cfg.ClusterState = embed.ClusterStateFlagExisting
	c.startMember(i, true)
}

func (c *Cluster) stopAll() {
	for i := range c.members {
		c.Stop(i)
	}
}
