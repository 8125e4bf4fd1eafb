package ipamcni

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/podnet/podnet/cni"
)

// ParseReleaseRequest reads what a DEL needs to release an attachment:
// the network, the store and the node, and nothing else. A configuration
// edited since the ADD (a pool that no longer parses or cannot be cut
// into blocks, a field this version does not know) must not make every
// retry of the DEL fail: the addresses are found by their handle, which
// depends on none of it.
func ParseReleaseRequest(stdin []byte) (*Request, error) {
	var nc netConf
	if err := json.Unmarshal(stdin, &nc); err != nil {
		return nil, cni.Errorf(cni.CodeDecodingFailure, "podnet-ipam: cannot decode config: %v", err)
	}
	if len(nc.IPAM) == 0 {
		return nil, cni.Errorf(cni.CodeInvalidNetworkConfig, "podnet-ipam: config has no ipam section")
	}
	var c struct {
		Store        string `json:"store"`
		EtcdCertFile string `json:"etcdCertFile"`
		EtcdKeyFile  string `json:"etcdKeyFile"`
		EtcdCAFile   string `json:"etcdCAFile"`
		Prefix       string `json:"prefix"`
		Node         string `json:"node"`
		ReleaseDir   string `json:"releaseDir"`
		NodeLock     string `json:"nodeLock"`
	}
	if err := json.Unmarshal(nc.IPAM, &c); err != nil {
		return nil, cni.Errorf(cni.CodeInvalidNetworkConfig, "ipam: %v", err)
	}
	r := &Request{Network: nc.Name, Config: Config{Store: c.Store, EtcdCertFile: c.EtcdCertFile, EtcdKeyFile: c.EtcdKeyFile,
		EtcdCAFile: c.EtcdCAFile, Prefix: c.Prefix, Node: c.Node, ReleaseDir: c.ReleaseDir, NodeLock: c.NodeLock}}
	if r.Config.Store == "" {
		r.Config.Store = DefaultStore
	}
	if r.Config.Node == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, configErr("node", "not set and no host name: %v", err)
		}
		r.Config.Node = h
	}
	return r, nil
}

// Release releases the attachment's addresses and endpoint (DelAttachment)
// for a DEL. A bbolt store that does not exist has allocated nothing: the
// release succeeds without creating it, as a DEL on a fresh host, or
// after the store was removed, must. When an etcd or Kubernetes store
// cannot be reached (code 11), the release is recorded as a ReleaseRecord
// for the node's agent and the DEL succeeds; only if that record cannot be
// written does the DEL fail, and the runtime retries it.
func Release(ctx context.Context, req *Request, at PodInterface) error {
	if path, ok := strings.CutPrefix(req.Config.Store, "bolt:"); ok && path != "" {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil
		}
	}
	err := release(ctx, req, at)
	if err == nil || CodeOf(err) != cni.CodeTryAgainLater || !remoteStore(req) {
		return err
	}
	if terr := WriteReleaseRecord(releaseDir(req), releaseRecordFor(req, at, time.Now())); terr != nil {
		return cni.Errorf(cni.CodeIOFailure, "podnet-ipam: %v; and the release could not be recorded for later: %v", err, terr)
	}
	return nil
}

// releaseUnavailableTimeout is how long a DEL retries a remote store it
// cannot reach before it records the release for the agent.
const releaseUnavailableTimeout = 2 * time.Second

func release(ctx context.Context, req *Request, at PodInterface) error {
	p, err := openIPAM(ctx, req, oneRelease)
	if err != nil {
		return err
	}
	err = p.DelAttachment(ctx, at)
	if cerr := p.Close(); err == nil {
		err = cerr
	}
	return err
}
