package ipamcni

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/internal/flock"
)

// DefaultNodeLock is the file a node's plugins lock around each IPAM
// operation on the Kubernetes API (Config.NodeLock).
const DefaultNodeLock = "/run/podnet/ipam.lock"

// nodeLockTimeout bounds the wait for the node lock when the caller set no
// deadline; the caller's deadline ends it sooner.
const nodeLockTimeout = 20 * time.Second

// needsNodeLock reports whether req's store is one whose writes are
// compare-and-swaps over the network: there, the node's concurrent
// operations would mostly race for the same block and retry each other
// (a burst of k pods costs ~k/2 retries each), so they take turns. A
// bbolt store is serialized by its file lock already, and etcd keeps its
// own behaviour.
func needsNodeLock(req *Request) bool {
	return strings.HasPrefix(req.Config.Store, "kubernetes:") || strings.HasPrefix(req.Config.Store, "agent:")
}

// nodeLocked runs fn holding the node lock if req's store needs one.
func (p *IPAM) nodeLocked(ctx context.Context, fn func() error) error {
	if !needsNodeLock(p.req) {
		return fn()
	}
	path := p.req.Config.NodeLock
	if path == "" {
		path = DefaultNodeLock
	}
	l, err := flock.AcquireLong(ctx, path, nodeLockTimeout)
	if errors.Is(err, flock.ErrBusy) {
		return cni.Errorf(cni.CodeTryAgainLater, "podnet-ipam: the node's IPAM lock: %v", err)
	}
	if err != nil {
		return cni.Errorf(cni.CodeIOFailure, "podnet-ipam: the node's IPAM lock: %v", err)
	}
	defer l.Release()
	return fn()
}
