package kvstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/bolt"
	"github.com/podnet/podnet/ipam/store/etcd"
)

// Options say how to reach the store named by a --store value.
type Options struct {
	// TLS files for etcd; all empty means plain HTTP.
	CertFile, KeyFile, CAFile string
	DialTimeout               time.Duration // default 5s
	// Dialer, when set, opens etcd connections (tests reach an etcd in a
	// network namespace this way).
	Dialer func(ctx context.Context, addr string) (net.Conn, error)
}

// Open opens "etcd://HOST:PORT[,HOST:PORT...]" ("etcds://" for TLS)
// or "bolt:PATH". For
// etcd it also returns the client, which the agent needs for its lease;
// for bolt the client is nil.
func Open(ctx context.Context, spec string, o Options) (ipam.Store, *clientv3.Client, error) {
	if path, ok := strings.CutPrefix(spec, "bolt:"); ok {
		s, err := bolt.Open(ctx, bolt.Options{Path: path})
		return s, nil, err
	}
	// etcds:// is etcd over TLS, as podnet-ipam spells it; TLS files make
	// etcd:// TLS too.
	scheme := "http://"
	rest, ok := strings.CutPrefix(spec, "etcd://")
	if !ok {
		if rest, ok = strings.CutPrefix(spec, "etcds://"); !ok {
			return nil, nil, fmt.Errorf("store %q: want etcd://HOST:PORT[,HOST:PORT] or bolt:PATH", spec)
		}
		scheme = "https://"
	}
	if o.CertFile != "" || o.KeyFile != "" || o.CAFile != "" {
		scheme = "https://"
	}
	var eps []string
	for _, hp := range strings.Split(rest, ",") {
		hp = strings.TrimSuffix(strings.TrimSpace(hp), "/")
		if hp == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(hp); err != nil {
			return nil, nil, fmt.Errorf("store %q: endpoint %q: %w", spec, hp, err)
		}
		eps = append(eps, scheme+hp)
	}
	if len(eps) == 0 {
		return nil, nil, fmt.Errorf("store %q: no endpoints", spec)
	}
	cfg := clientv3.Config{Endpoints: eps, DialTimeout: o.DialTimeout, Logger: zap.NewNop()}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if scheme == "https://" {
		if (o.CertFile == "") != (o.KeyFile == "") {
			return nil, nil, errors.New("etcd TLS: --etcd-cert and --etcd-key must be set together")
		}
		tc, err := (&transport.TLSInfo{CertFile: o.CertFile, KeyFile: o.KeyFile, TrustedCAFile: o.CAFile}).ClientConfig()
		if err != nil {
			return nil, nil, fmt.Errorf("etcd TLS (cert %q, key %q, ca %q): %w", o.CertFile, o.KeyFile, o.CAFile, err)
		}
		cfg.TLS = tc
	}
	if o.Dialer != nil {
		cfg.DialOptions = append(cfg.DialOptions, grpcDialer(o.Dialer))
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("etcd %v: %w", eps, err)
	}
	return etcd.NewFromClient(c), c, nil
}
