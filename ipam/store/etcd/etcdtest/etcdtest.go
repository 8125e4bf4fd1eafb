// Package etcdtest starts real etcd members for tests, each a process of
// its own (the etcd server that internal/etcdbin builds): 127.0.0.1
// only, free ports, data in t.TempDir(), logs kept in that directory and
// shown when a member fails, all stopped in t.Cleanup. Members can be
// stopped and started again for fault tests. A member exits with its
// test binary even when the test crashes: it lives as long as its stdin.
package etcdtest

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/podnet/podnet/internal/etcdbin"
)

// Cluster is a running etcd cluster.
type Cluster struct {
	t       testing.TB
	bin     string
	members []*member
}

type member struct {
	name, dir, log        string
	peer, client, metrics string
	flags                 []string
	cmd                   *exec.Cmd // nil while stopped
	stdin                 io.WriteCloser
	ready, exited         chan struct{}
}

// config is what options change.
type config struct {
	certFile, keyFile, caFile string
}

// Option changes how Start configures the members.
type Option func(*config)

// WithClientTLS serves clients over TLS with this certificate and key,
// requiring client certificates signed by the CA in caFile.
func WithClientTLS(certFile, keyFile, caFile string) Option {
	return func(c *config) { c.certFile, c.keyFile, c.caFile = certFile, keyFile, caFile }
}

// Start starts an n-member cluster and waits until every member is ready.
func Start(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	bin, err := etcdbin.Path()
	if err != nil {
		t.Fatal(err)
	}
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	dir := t.TempDir()
	c := &Cluster{t: t, bin: bin}
	scheme := "http"
	if cfg.certFile != "" {
		scheme = "https"
	}
	var initial []string
	for i := range n {
		m := &member{name: fmt.Sprintf("m%d", i), dir: filepath.Join(dir, fmt.Sprintf("m%d", i))}
		m.log = m.dir + ".log"
		m.peer, m.client, m.metrics = freeURL(t, "http"), freeURL(t, scheme), freeURL(t, "http")
		initial = append(initial, m.name+"="+m.peer)
		c.members = append(c.members, m)
	}
	token := fmt.Sprintf("podnet-test-%d", time.Now().UnixNano())
	for _, m := range c.members {
		m.flags = memberFlags(m, strings.Join(initial, ","), token, cfg)
	}
	t.Cleanup(c.stopAll)
	// Members must start together: none is ready before a quorum is up.
	for i := range c.members {
		c.startMember(i, "new")
	}
	for i := range c.members {
		c.waitReady(i)
	}
	return c
}

func memberFlags(m *member, initial, token string, cfg config) []string {
	f := []string{
		"--name=" + m.name, "--data-dir=" + m.dir,
		"--listen-peer-urls=" + m.peer, "--initial-advertise-peer-urls=" + m.peer,
		"--listen-client-urls=" + m.client, "--advertise-client-urls=" + m.client,
		"--listen-metrics-urls=" + m.metrics,
		"--initial-cluster=" + initial, "--initial-cluster-token=" + token,
		"--log-level=error",
		// Tests do not survive power loss; fsync would only slow them.
		"--unsafe-no-fsync",
		// Shorter than the defaults (100/1000) so that fault tests elect
		// quickly, long enough not to flap on a loaded CI machine.
		"--heartbeat-interval=50", "--election-timeout=1000",
	}
	if cfg.certFile != "" {
		f = append(f, "--cert-file="+cfg.certFile, "--key-file="+cfg.keyFile,
			"--trusted-ca-file="+cfg.caFile, "--client-cert-auth")
	}
	return f
}

// freeURL is a URL on a free port of 127.0.0.1 below Linux's ephemeral
// range (32768 and up by default). A port the kernel picks (":0") is
// one it may pick again for an outgoing connection, such as a started
// member's to its peers, before the member meant for it binds it: a
// 3-member start then fails, and a member that lost its peers never
// stops (the 30-minute hang of a run beside other work).
func freeURL(t testing.TB, scheme string) string {
	for range 200 {
		port := 20000 + rand.IntN(12000)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l.Close()
		return scheme + "://" + l.Addr().String()
	}
	t.Fatal("etcdtest: no free port in 20000-31999 after 200 tries")
	return ""
}
