package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/rest"

	"github.com/podnet/podnet/agent/cniinstall"
	"github.com/podnet/podnet/agent/route"
	"github.com/podnet/podnet/agent/source/kubeapi"
	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/dataplane/policyrules"
	"github.com/podnet/podnet/flows"
	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipamcni"
)

// Config configures an Agent. Node is required, and Store unless Kube is
// set.
type Config struct {
	Node string
	// Store is the IPAM store. With Kube nil it is also the datastore:
	// the node registers in it and the agent routes from its nodes and
	// IPAM indexes. With Kube set it is only the IPAM: the node-local
	// bbolt file in the node-CIDR model (nil then means no GC), block
	// IPAM's store on the API (kubeblocks.OpenStore) with Kube.Blocks.
	Store ipam.Store
	// Kube, when set, makes the Kubernetes API the datastore (see
	// KubeConfig).
	Kube *KubeConfig
	// Etcd, when set, is the client under Store: the node record is
	// written under a lease of LeaseTTL that the agent keeps alive.
	Etcd *clientv3.Client
	// Prefix is the store prefix (default ipam.DefaultPrefix).
	Prefix string
	Mode   route.Mode
	// UnderlayInterface carries traffic to other nodes; empty: the
	// interface of the IPv4 default route.
	UnderlayInterface string
	// NetNS is the network namespace to program (a path); empty: the
	// process's own. Tests and benchmarks run agents in-process this way.
	NetNS    string
	LeaseTTL time.Duration // default 10s
	// ResyncInterval is how often the agent reconciles even without
	// changes, repairing anything changed behind its back (default 1m).
	ResyncInterval time.Duration
	// GCInterval is how often IPAM GC runs (0: never); GCGrace how long a
	// handle must have been uncached before it is released (default 1m).
	GCInterval, GCGrace time.Duration
	// BlockGrace is how long one of the node's blocks must have been
	// empty before GC lets it go back to its pool, one spare per pool
	// kept (default DefaultBlockGrace; negative: never).
	BlockGrace time.Duration
	// CacheDir is the CNI cache directory GC reads attachments from
	// (default cni.DefaultCacheDir; the results are under results/).
	CacheDir string
	// ReleaseDir is where DELs write release records for the releases
	// they could not make (default ipamcni.DefaultReleaseDir); GC
	// finishes them.
	ReleaseDir string
	// SysctlRecord is where the original values of the node-wide
	// sysctls the agent changes are recorded (route.Config.SysctlRecord);
	// empty: not recorded.
	SysctlRecord string
	// Install, when set, is applied once the agent is ready.
	Install *cniinstall.Config
	// NetworkPolicy enforces NetworkPolicy for the node's pods (netpol),
	// with the Kubernetes datastore only, and serves CNI ADD's
	// first-packet handshake on PolicySocket (netpol.Admission): the
	// installed config names the socket, and ADD waits for a selected
	// pod's rules or closes the pod until they are in place.
	NetworkPolicy bool
	// PolicyDenyLog, with NetworkPolicy, logs denied packets
	// (netpol.Config.DenyLog).
	PolicyDenyLog *policyrules.DenyLog
	// PolicySocket is where the policy service serves CNI ADD's
	// first-packet handshake with NetworkPolicy (default
	// admitsock.DefaultSocket); the installed config names it.
	PolicySocket string
	// Encryption is EncryptionNone (default) or EncryptionWireGuard: pod
	// traffic to other nodes through podnet.wg (agent/wireguard), in
	// strict mode.
	Encryption string
	// WireGuardPort and WireGuardKeyFile are the device's UDP port and
	// where the private key is kept (wireguard.DefaultPort and
	// wireguard.DefaultKeyFile by default).
	WireGuardPort    int
	WireGuardKeyFile string
	// Flows, when set, is the ring of the node's flow records (issue 32):
	// the agent serves it at /flows (flowapi) and counts what enters it
	// through FlowSink in the flow metrics. Nil: flows are off.
	Flows *flows.Ring
	// Registry receives the agent's metrics; nil makes a new one with the
	// Go and process collectors.
	Registry *prometheus.Registry
	Logger   *slog.Logger
}

// KubeConfig selects the Kubernetes API as the datastore: the node
// registers by annotating its own Node, and the agent watches every Node
// (kubeapi). Without Blocks it routes to each Node's spec.podCIDRs (the
// node-CIDR model): no object per pod, block or address exists in the
// API.
type KubeConfig struct {
	// REST reaches the API server: rest.InClusterConfig in a pod.
	REST *rest.Config
	// Blocks, when set, selects block IPAM on the API instead of node
	// CIDRs (see KubeBlocks).
	Blocks *KubeBlocks
	// Requests, when set, is the counter of the agent's API requests that
	// its block IPAM store (opened before the agent) counts in too; nil:
	// the agent makes its own.
	Requests *kubeapi.RequestCounter
}

// KubeBlocks selects block IPAM on the Kubernetes API (model B): pools,
// blocks and one index per node are podnet.io objects (CRDs in
// deploy/kubernetes/crds); the agent routes from the indexes (IPAMNodes)
// and serves the node's plugins their store on a unix socket
// (ipam/store/agentsock), through a cache, so that an allocation costs
// the API one block write. Config.Store is the agent's own store on the
// API (kubeblocks.OpenStore): behind the socket, and through the
// socket's cache for seeding pools, GC and the removal of deleted nodes.
type KubeBlocks struct {
	// Pools are created at start where the API has no pool of the name
	// (the installed conflist's pools): the plugins may not create pools.
	// A pool that exists is left as it is: the API is the truth.
	Pools []ipam.Pool
	// Socket is where the plugins' store is served ("agent:" + Socket in
	// the conflist, kubeblocks.DefaultSocket); empty serves none.
	Socket string
}

// complete checks cfg and fills in the defaults of what it leaves unset.
func (cfg *Config) complete() error {
	if err := validNodeName(cfg.Node); err != nil {
		return err
	}
	if cfg.Store == nil && cfg.Kube == nil {
		return errors.New("agent: no store")
	}
	if cfg.Mode == "" {
		cfg.Mode = route.ModeAuto
	}
	if _, err := route.ParseMode(string(cfg.Mode)); err != nil {
		return err
	}
	if cfg.Prefix == "" {
		cfg.Prefix = ipam.DefaultPrefix
	}
	if err := checkEncryption(cfg); err != nil {
		return err
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 10 * time.Second
	}
	if cfg.ResyncInterval <= 0 {
		cfg.ResyncInterval = time.Minute
	}
	if cfg.BlockGrace == 0 {
		cfg.BlockGrace = DefaultBlockGrace
	}
	if cfg.GCGrace <= 0 {
		cfg.GCGrace = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ReleaseDir == "" {
		cfg.ReleaseDir = ipamcni.DefaultReleaseDir
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = cni.DefaultCacheDir
	}
	if cfg.Install != nil {
		// A bad config file fails the start, not the install much later.
		if err := cfg.Install.Check(cfg.Node); err != nil {
			return fmt.Errorf("agent: network config: %w", err)
		}
		nodeCIDRDatastore := cfg.Kube != nil && cfg.Kube.Blocks == nil
		if (cfg.Install.NodeCIDR != nil) != nodeCIDRDatastore {
			return errors.New("agent: the node-CIDR install goes with the Kubernetes datastore's node-CIDR IPAM, and only with it")
		}
	}
	if cfg.NetworkPolicy && cfg.Kube == nil {
		return errors.New("agent: network policy needs the Kubernetes datastore (--datastore kubernetes): NetworkPolicies, Namespaces and Pods are read from the API")
	}
	if cfg.PolicyDenyLog != nil && !cfg.NetworkPolicy {
		return errors.New("agent: the policy deny log goes with network policy (--network-policy)")
	}
	if cfg.Kube != nil && cfg.Kube.Blocks != nil && cfg.Kube.Blocks.Socket != "" && cfg.Store == nil {
		return errors.New("agent: an IPAM socket without block IPAM's store to serve (kubeblocks.OpenStore)")
	}
	return nil
}
