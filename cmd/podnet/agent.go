package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/podnet/podnet/version"

	"github.com/podnet/podnet/agent"
	"github.com/podnet/podnet/agent/cniinstall"
	"github.com/podnet/podnet/agent/kubeblocks"
	"github.com/podnet/podnet/agent/netpol/admitsock"
	"github.com/podnet/podnet/agent/route"
	"github.com/podnet/podnet/agent/source/kvstore"
	"github.com/podnet/podnet/agent/wireguard"
	"github.com/podnet/podnet/dataplane/policyrules"
	"github.com/podnet/podnet/install"
	"github.com/podnet/podnet/ipamcni"
)

// agentOptions are the flags of podnet agent.
type agentOptions struct {
	node, storeSpec, mode, underlay, metricsAddr string
	certFile, keyFile, caFile                    string
	// --datastore kubernetes: the API server, and the cluster's pod
	// CIDRs for the plugin's masqExclude.
	datastore, kubeconfig string
	clusterCIDRs          []string
	// --ipam blocks: block IPAM on the API, and where the plugins reach
	// it.
	ipamModel, ipamSocket         string
	gcInterval, gcGrace, leaseTTL time.Duration
	// blockGrace: how long a block stays empty before GC lets it go.
	blockGrace time.Duration
	releaseDir string
	// sysctlRecord is where the agent records the sysctls it changes.
	sysctlRecord string
	// --install, and what it installs from where.
	doInstall, uninstallOnExit bool
	srcDir, networkConfig      string
	// networkPolicy enforces NetworkPolicy (Kubernetes datastore), and
	// serves the plugins' first-packet handshake on policySocket;
	// denyLog logs what it drops.
	networkPolicy, denyLog bool
	// encryption of pod traffic between nodes, and WireGuard's port and
	// key file.
	encryption, wgKeyFile string
	wgPort                int
	denyLogCfg            policyrules.DenyLog
	policySocket          string
	flows                 flowsOptions
}

func newAgentCommand(opts *globalOptions) *cobra.Command {
	ao := &agentOptions{}
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the node agent: register the node, route to other nodes' pods, install the network config once ready",
		Long: `agent registers this node in the store under a lease it keeps alive, watches
the other nodes and their address blocks, and programs a route to every remote
block: via the node's underlay address (host-gw), or over the podnet.vxlan
device (vxlan); auto picks host-gw for nodes on the same L2 segment. Own blocks
get blackhole routes. With --install, once the node is registered and its
routes are programmed it installs the plugins and writes the network config, so
that a runtime never starts pods on a node whose pod network is not ready.

With --datastore kubernetes there is no etcd: the agent registers the node by
annotating its Node (podnet.io/underlay-address, podnet.io/vtep-mac,
podnet.io/link-local6), watches every Node, and routes to each one's
spec.podCIDRs (kube-controller-manager --allocate-node-cidrs). The config it
installs hands out this node's pod addresses from its own podCIDRs, in a
node-local bbolt --store, and excludes --cluster-cidr from masquerade; it is
written once the Node has podCIDRs, and again if they change.

On SIGTERM it exits leaving routes in place: pods keep working while it
restarts. It serves /metrics, /healthz, /readyz and /status on --metrics-addr,
and with --flows the node's flow records at /flows (podnet flows).

A --mode, --cluster-cidr or --network-config it cannot use (the ConfigMap's
routing_mode, cluster_cidr and conflist in deploy/kubernetes) does not end it:
it touches nothing on the node, answers /healthz, and /readyz says which
setting and why (podnet_agent_config_valid 0).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return ao.run(cmd.Context(), opts) },
	}
	f := cmd.Flags()
	f.StringVar(&ao.node, "node", os.Getenv("NODE_NAME"), "node name (default $NODE_NAME, else the host name)")
	f.StringVar(&ao.datastore, "datastore", "etcd", "where nodes register and are watched: etcd (the --store) or kubernetes (Node objects; no etcd)")
	f.StringVar(&ao.storeSpec, "store", "", "IPAM store: etcd://HOST:PORT[,HOST:PORT] (or bolt:PATH for one node); with --datastore kubernetes, the node-local bolt:PATH (default "+ipamcni.DefaultStore+")")
	f.StringVar(&ao.kubeconfig, "kubeconfig", "", "with --datastore kubernetes: kubeconfig file (default: the pod's in-cluster config)")
	f.StringVar(&ao.ipamModel, "ipam", ipamNodeCIDR, "with --datastore kubernetes: node-cidr (each node's pods from its Node's spec.podCIDRs, in a local bbolt file) or blocks (block IPAM on the API: podnet.io IPPools, IPAMBlocks and IPAMNodes)")
	f.StringVar(&ao.ipamSocket, "ipam-socket", kubeblocks.DefaultSocket, "with --ipam blocks: the unix socket the node's plugins allocate through (their conflist's ipam.store is agent:PATH)")
	f.StringSliceVar(&ao.clusterCIDRs, "cluster-cidr", nil, "with --datastore kubernetes: the cluster's pod CIDRs (kube-controller-manager --cluster-cidr; comma-separated for dual-stack), never masqueraded")
	f.StringVar(&ao.certFile, "etcd-cert", "", "etcd client certificate")
	f.StringVar(&ao.keyFile, "etcd-key", "", "etcd client key")
	f.StringVar(&ao.caFile, "etcd-ca", "", "etcd CA bundle")
	f.StringVar(&ao.mode, "mode", string(route.ModeAuto), "host-gw, vxlan, or auto (host-gw on the same L2, vxlan otherwise)")
	f.StringVar(&ao.underlay, "underlay-interface", "", "interface to other nodes (default: that of the IPv4 default route)")
	f.StringVar(&ao.metricsAddr, "metrics-addr", ":9603", "address for /metrics, /healthz and /readyz (empty: none)")
	f.BoolVar(&ao.doInstall, "install", false, "once ready, install the plugins into --bin-dir and write the network config into --conf-dir")
	f.StringVar(&ao.srcDir, "src-dir", "", "where the plugin binaries are (default: cni/ beside the podnet binary)")
	f.StringVar(&ao.networkConfig, "network-config", "", "conflist to install (default: generated for --store); its podnet-ipam gets this node's name")
	f.BoolVar(&ao.uninstallOnExit, "uninstall-on-exit", false, "remove the network config when the agent exits")
	f.DurationVar(&ao.gcInterval, "gc-interval", 5*time.Minute, "how often to release this node's leaked addresses (0: never)")
	f.DurationVar(&ao.gcGrace, "gc-grace", time.Minute, "how long an address's attachment must be missing before GC releases it")
	f.DurationVar(&ao.blockGrace, "block-grace", agent.DefaultBlockGrace, "how long one of this node's blocks must have been empty before GC lets it go back to its pool, one spare per pool kept (negative: never)")
	f.StringVar(&ao.releaseDir, "release-dir", ipamcni.DefaultReleaseDir, "where DELs record releases they could not make while the store was unreachable; GC finishes them")
	f.StringVar(&ao.sysctlRecord, "sysctl-record", defaultSysctlRecord, "file in which the agent records the original value of each node-wide sysctl before it first changes it, so that podnet uninstall restores exactly those (empty: none)")
	f.BoolVar(&ao.networkPolicy, "network-policy", false, "with --datastore kubernetes: enforce NetworkPolicy for this node's pods in nftables, as deploy/kubernetes does; a new pod's ADD waits for its rules, or the pod starts closed until the agent admits it")
	f.StringVar(&ao.policySocket, "policy-socket", admitsock.DefaultSocket, "with --network-policy: the unix socket of the plugins' first-packet handshake (their conflist's policySocket)")
	f.BoolVar(&ao.denyLog, "policy-deny-log", false, "with --network-policy: log every packet policy drops (pod, direction, addresses, protocol, port) at info level, through NFLOG, under a rate limit for the node")
	f.Uint32Var(&ao.denyLogCfg.Rate, "policy-deny-log-rate", policyrules.DefaultDenyLogRate, "with --policy-deny-log: records a second, for the whole node")
	f.Uint32Var(&ao.denyLogCfg.Burst, "policy-deny-log-burst", policyrules.DefaultDenyLogBurst, "with --policy-deny-log: records at once before the rate applies")
	f.Uint16Var(&ao.denyLogCfg.Group, "policy-deny-log-group", policyrules.DefaultDenyLogGroup, "with --policy-deny-log: the NFLOG group (one listener per group and node)")
	f.StringVar(&ao.encryption, "encryption", agent.EncryptionNone, "encryption of pod traffic between nodes: none, or wireguard (podnet.wg: kernel WireGuard, else wireguard-go in the agent; strict: a node without a key is unreachable, never reached in the clear)")
	f.IntVar(&ao.wgPort, "wireguard-port", wireguard.DefaultPort, "with --encryption wireguard: the UDP port podnet.wg listens on, on the underlay")
	f.StringVar(&ao.wgKeyFile, "wireguard-key-file", wireguard.DefaultKeyFile, "with --encryption wireguard: the node's private key (mode 0600; generated when missing)")
	f.DurationVar(&ao.leaseTTL, "lease-ttl", 10*time.Second, "TTL of the node registration's etcd lease")
	ao.flows.register(f)
	registerValues(cmd, "mode", string(route.ModeHostGW), string(route.ModeVXLAN), string(route.ModeAuto))
	return cmd
}

// run runs the agent until ctx ends, serving its metrics meanwhile.
func (ao *agentOptions) run(ctx context.Context, opts *globalOptions) error {
	in := version.Get()
	slog.Info("podnet agent", "version", in.Version, "revision", in.Revision, "go", in.GoVersion, "node", ao.node)
	ao.encryption = encryptionSetting(ao.encryption)
	settings := agent.Settings{RoutingMode: ao.mode, ClusterCIDRs: ao.clusterCIDRs, Encryption: ao.encryption, NetworkConfig: ao.networkConfig}
	if errs := settings.Check(); len(errs) > 0 {
		return ao.runDegraded(ctx, errs)
	}
	cfg, err := ao.config(opts)
	if agent.IsConfigError(err) {
		return ao.runDegraded(ctx, []error{err})
	}
	if err != nil {
		return err
	}
	if ao.datastore == datastoreKubernetes {
		if cfg.Kube.REST, err = ao.restConfig(); err != nil {
			return err
		}
	}
	if cfg.Kube != nil && cfg.Kube.Blocks != nil {
		return ao.runBlocks(ctx, cfg)
	}
	store, etcdClient, err := kvstore.Open(ctx, ao.storeSpec, kvstore.Options{CertFile: ao.certFile, KeyFile: ao.keyFile, CAFile: ao.caFile})
	if err != nil {
		return err
	}
	defer store.Close()
	if etcdClient != nil {
		defer etcdClient.Close()
	}
	cfg.Store, cfg.Etcd = store, etcdClient
	return ao.runAgent(ctx, cfg)
}

// encryptionRef is the DaemonSets' --encryption: the ConfigMap's key
// encryption, through an optional env entry.
const encryptionRef = "$(PODNET_ENCRYPTION)"

// encryptionSetting is --encryption as the agent takes it. A ConfigMap
// from a release before the key has none: the kubelet then sets no
// variable and passes the reference as it is, which means the key is
// unset, so none, as an empty value does.
func encryptionSetting(v string) string {
	if v == encryptionRef {
		slog.Info("the ConfigMap has no key encryption: encryption none", "flag", "--encryption="+v)
		return ""
	}
	return v
}

// runAgent runs an agent of cfg, its metrics served, until ctx ends.
func (ao *agentOptions) runAgent(ctx context.Context, cfg agent.Config) error {
	a, err := agent.New(cfg)
	if err != nil {
		return err
	}
	stop, err := ao.serveMetrics(a.Handler())
	if err != nil {
		return err
	}
	defer stop()
	return a.Run(ctx)
}

// runDegraded runs an agent that touches nothing, its /readyz saying
// which settings cannot be used, until ctx ends (agent.Degraded).
func (ao *agentOptions) runDegraded(ctx context.Context, errs []error) error {
	d := agent.NewDegraded(errs, nil, slog.Default())
	d.Node = ao.node
	stop, err := ao.serveMetrics(d.Handler())
	if err != nil {
		return err
	}
	defer stop()
	return d.Run(ctx)
}

// config is the agent's configuration from the flags, checked before
// anything is opened; the caller adds the store.
func (ao *agentOptions) config(opts *globalOptions) (agent.Config, error) {
	node := ao.node
	if node == "" {
		h, err := os.Hostname()
		if err != nil {
			return agent.Config{}, fmt.Errorf("--node not set, $NODE_NAME empty, and no host name: %w", err)
		}
		node = h
	}
	m, err := route.ParseMode(ao.mode)
	if err != nil {
		return agent.Config{}, fmt.Errorf("--mode: %w", err)
	}
	cfg := agent.Config{
		Node: node, Mode: m, UnderlayInterface: ao.underlay,
		LeaseTTL: ao.leaseTTL, GCInterval: ao.gcInterval, GCGrace: ao.gcGrace, BlockGrace: ao.blockGrace, CacheDir: opts.cacheDir, ReleaseDir: ao.releaseDir, SysctlRecord: ao.sysctlRecord,
		Logger: slog.Default(), NetworkPolicy: ao.networkPolicy, PolicySocket: ao.policySocket,
		Encryption: ao.encryption, WireGuardPort: ao.wgPort, WireGuardKeyFile: ao.wgKeyFile,
	}
	if err := ao.flows.config(&cfg); err != nil {
		return agent.Config{}, err
	}
	if ao.encryption == agent.EncryptionWireGuard && (ao.wgPort < 1 || ao.wgPort > 65535) {
		return agent.Config{}, fmt.Errorf("--wireguard-port %d: want 1 to 65535", ao.wgPort)
	}
	if ao.denyLog {
		if !ao.networkPolicy {
			return agent.Config{}, errors.New("--policy-deny-log goes with --network-policy")
		}
		dl := ao.denyLogCfg
		cfg.PolicyDenyLog = &dl
	}
	nodeCIDR, err := ao.datastoreConfig(&cfg)
	if err != nil {
		return agent.Config{}, err
	}
	if !ao.doInstall {
		if ao.uninstallOnExit {
			slog.Warn("--uninstall-on-exit without --install: the agent installs no config, so it removes none")
		}
		return cfg, nil
	}
	srcDir := ao.srcDir
	if srcDir == "" {
		if srcDir, err = defaultPluginDir(); err != nil {
			return agent.Config{}, err
		}
	}
	cfg.Install = &cniinstall.Config{
		SrcDir: srcDir, BinDir: opts.binDirs[0], ConfDir: opts.confDir, NetworkConfig: ao.networkConfig,
		Network: install.Network{Store: ao.storeSpec}, UninstallOnExit: ao.uninstallOnExit,
		NodeCIDR: nodeCIDR,
	}
	if ao.networkConfig != "" {
		// The conflist as the agent would install it, before a store is
		// opened: a ConfigMap's conflist this agent cannot use leaves
		// the node as it is (runDegraded).
		if err := cfg.Install.Check(node); err != nil {
			return agent.Config{}, &agent.ConfigError{Key: filepath.Base(ao.networkConfig), Value: ao.networkConfig, Want: err.Error()}
		}
	}
	return cfg, nil
}

// serveMetrics serves h on --metrics-addr, if set, until stop.
func (ao *agentOptions) serveMetrics(h http.Handler) (stop func(), err error) {
	if ao.metricsAddr == "" {
		return func() {}, nil
	}
	l, err := net.Listen("tcp", ao.metricsAddr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	// Requests' contexts end at stop: a /flows follower's stream never
	// goes idle, and Shutdown would wait for it.
	base, endRequests := context.WithCancel(context.Background())
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return base }}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("metrics server", "err", err)
		}
	}()
	return func() {
		endRequests()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
