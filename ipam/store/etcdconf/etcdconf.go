// Package etcdconf says how to reach an etcd cluster, in one definition
// for both etcd stores: ipam/store/etcd (the full client, for the agent
// and the CLI) and ipam/store/etcdgw (the JSON gateway, for plugins).
//
// Plugins link it on every exec, through etcdgw: it must stay on the
// standard library's crypto/tls and nothing heavier, and it logs nothing.
package etcdconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"
)

// DefaultDialTimeout bounds a connection attempt to one member when
// Cluster.DialTimeout is zero.
const DefaultDialTimeout = 5 * time.Second

// Cluster is where an etcd cluster is and how to authenticate to it.
type Cluster struct {
	// Endpoints are the members' client URLs; the gateway store also
	// takes host:port (http, or https when a TLS file is set).
	Endpoints []string
	// DialTimeout bounds a connection attempt to one member (default
	// DefaultDialTimeout).
	DialTimeout time.Duration
	// TLS: all three empty means plain HTTP; CAFile alone verifies the
	// server; CertFile and KeyFile, set together, add a client
	// certificate.
	CertFile, KeyFile, CAFile string
	// Username and Password, when set, authenticate to etcd's auth.
	Username, Password string
}

// WithDefaults returns c with the defaults of unset fields filled in; it
// fails when c names no endpoint.
func (c Cluster) WithDefaults() (Cluster, error) {
	if len(c.Endpoints) == 0 {
		return c, errors.New("etcd store: no endpoints")
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	return c, nil
}

// TLS reports whether c names a TLS file, which makes every member https.
func (c Cluster) TLS() bool { return c.CertFile != "" || c.KeyFile != "" || c.CAFile != "" }

// TLSConfig loads c's TLS files: the client certificate, if any, and the
// CA the members' certificates must chain to (the system's when CAFile is
// empty).
func (c Cluster) TLSConfig() (*tls.Config, error) {
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, fmt.Errorf("etcd store: certFile %q and keyFile %q must be set together", c.CertFile, c.KeyFile)
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("etcd store: client certificate %q / key %q: %w", c.CertFile, c.KeyFile, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("etcd store: CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("etcd store: CA file %q holds no PEM certificate", c.CAFile)
		}
		tc.RootCAs = pool
	}
	return tc, nil
}
