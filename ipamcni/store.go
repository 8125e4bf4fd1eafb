package ipamcni

import (
	"context"
	"strings"
	"time"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/agentsock"
	"github.com/podnet/podnet/ipam/store/bolt"
	"github.com/podnet/podnet/ipam/store/etcdgw"
	"github.com/podnet/podnet/ipam/store/kube"
)

// OpenStore opens the configured store for a process that may keep it a
// while (the CLI): the bbolt file is locked only for each transaction,
// so plugins on the node take turns with it.
func OpenStore(ctx context.Context, c *Config) (ipam.Store, error) {
	return openStore(ctx, c, perTransaction)
}

// storeUse is how long a process keeps the store, and what it waits for.
type storeUse int

const (
	perTransaction storeUse = iota // the CLI, the agent
	oneOperation                   // a plugin's one IPAM operation
	// oneOperationPipelined: oneOperation whose writes return before
	// they are durable (bbolt's AckApplied); the caller Syncs.
	oneOperationPipelined
	// oneRelease: oneOperation for a DEL, which gives up on an
	// unreachable remote store sooner (releaseUnavailableTimeout).
	oneRelease
)

// openStore opens the store; for oneOperation, a plugin's single
// IPAM operation, the bbolt file is locked and mapped once, from Open to
// Close. An allocation reads the store several times before its one
// write; opening the file for each read (lock, open, mmap, meta pages)
// cost more than the reads, and more lock traffic for the other plugins
// on the node, than holding the lock for the whole operation (about a
// millisecond, most of it the commit's fsyncs).
func openStore(ctx context.Context, c *Config, use storeUse) (ipam.Store, error) {
	kind, rest, ok := strings.Cut(c.Store, ":")
	switch {
	case ok && kind == "bolt" && rest != "":
		return bolt.Open(ctx, bolt.Options{Path: rest, LockTimeout: 10 * time.Second,
			HoldOpen: use != perTransaction, AckApplied: use == oneOperationPipelined})
	case ok && (kind == "etcd" || kind == "etcds") && strings.HasPrefix(rest, "//"):
		var eps []string
		for _, ep := range strings.Split(strings.TrimPrefix(rest, "//"), ",") {
			if ep = strings.TrimSpace(ep); ep != "" {
				if kind == "etcds" {
					ep = "https://" + ep
				}
				eps = append(eps, ep)
			}
		}
		if len(eps) == 0 {
			return nil, cni.Errorf(cni.CodeInvalidNetworkConfig, "ipam.store %q: no etcd endpoints", c.Store)
		}
		return etcdgw.New(etcdgw.Options{Endpoints: eps, CertFile: c.EtcdCertFile, KeyFile: c.EtcdKeyFile, CAFile: c.EtcdCAFile})
	case ok && kind == "kubernetes":
		path, ok := kube.ParseSpec(c.Store)
		if !ok {
			return nil, cni.Errorf(cni.CodeInvalidNetworkConfig, "ipam.store %q: no kubeconfig path", c.Store)
		}
		s, err := kube.Open(kube.Options{Kubeconfig: path, Prefix: c.Prefix})
		if err != nil {
			return nil, cni.Errorf(cni.CodeInvalidNetworkConfig, "ipam.store %q: %v", c.Store, err)
		}
		return s, nil
	case ok && kind == "agent":
		// The node's agent serves its store (the Kubernetes API, in
		// model B) on a unix socket; nothing is dialed before the first
		// call, so an absent agent is an ErrUnavailable (code 11).
		path, ok := agentsock.ParseSpec(c.Store)
		if !ok {
			return nil, cni.Errorf(cni.CodeInvalidNetworkConfig, "ipam.store %q: no socket path", c.Store)
		}
		s, err := agentsock.Open(path, agentsock.ClientOptions{})
		if err != nil {
			return nil, cni.Errorf(cni.CodeInvalidNetworkConfig, "ipam.store %q: %v", c.Store, err)
		}
		return s, nil
	}
	return nil, cni.Errorf(cni.CodeInvalidNetworkConfig, "ipam.store %q: want bolt:PATH, etcd://HOST:PORT[,HOST:PORT], kubernetes:KUBECONFIG or agent:SOCKET", c.Store)
}
