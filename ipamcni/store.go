package ipamcni

import (
	"context"
	"strings"
	"time"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/bolt"
	"github.com/podnet/podnet/ipam/store/etcdgw"
)

// OpenStore opens the configured store. A plugin process opens it per
// call: the bbolt file is locked only for the transactions themselves, so
// concurrent plugins on one node take turns.
func OpenStore(ctx context.Context, c *Config) (ipam.Store, error) {
	kind, rest, ok := strings.Cut(c.Store, ":")
	switch {
	case ok && kind == "bolt" && rest != "":
		return bolt.Open(ctx, bolt.Options{Path: rest, LockTimeout: 10 * time.Second})
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
	}
	return nil, cni.Errorf(cni.CodeInvalidNetworkConfig, "ipam.store %q: want bolt:PATH or etcd://HOST:PORT[,HOST:PORT]", c.Store)
}
