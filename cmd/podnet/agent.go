package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/podnet/podnet/agent"
	"github.com/podnet/podnet/install"
)

func newAgentCommand(opts *globalOptions) *cobra.Command {
	var (
		node, storeSpec, mode, underlay, metricsAddr, srcDir, networkConfig string
		certFile, keyFile, caFile                                           string
		doInstall, uninstallOnExit                                          bool
		gcInterval, gcGrace, leaseTTL                                       time.Duration
	)
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

On SIGTERM it exits leaving routes in place: pods keep working while it
restarts. It serves /metrics, /healthz and /readyz on --metrics-addr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if node == "" {
				h, err := os.Hostname()
				if err != nil {
					return fmt.Errorf("--node not set, $NODE_NAME empty, and no host name: %w", err)
				}
				node = h
			}
			m, err := agent.ParseMode(mode)
			if err != nil {
				return fmt.Errorf("--mode: %w", err)
			}
			ctx := cmd.Context()
			store, etcdClient, err := agent.OpenStore(ctx, storeSpec, agent.StoreOptions{CertFile: certFile, KeyFile: keyFile, CAFile: caFile})
			if err != nil {
				return err
			}
			defer store.Close()
			if etcdClient != nil {
				defer etcdClient.Close()
			}
			cfg := agent.Config{
				Node: node, Store: store, Etcd: etcdClient, Mode: m, UnderlayInterface: underlay,
				LeaseTTL: leaseTTL, GCInterval: gcInterval, GCGrace: gcGrace, CacheDir: opts.cacheDir,
				Logger: slog.Default(),
			}
			if doInstall {
				if srcDir == "" {
					if srcDir, err = defaultPluginDir(); err != nil {
						return err
					}
				}
				cfg.Install = &agent.InstallConfig{
					SrcDir: srcDir, BinDir: opts.binDirs[0], ConfDir: opts.confDir, NetworkConfig: networkConfig,
					Network: install.Network{Store: storeSpec}, UninstallOnExit: uninstallOnExit,
				}
			} else if uninstallOnExit {
				slog.Warn("--uninstall-on-exit without --install: the agent installs no config, so it removes none")
			}
			a, err := agent.New(cfg)
			if err != nil {
				return err
			}
			var srv *http.Server
			if metricsAddr != "" {
				l, err := net.Listen("tcp", metricsAddr)
				if err != nil {
					return fmt.Errorf("--metrics-addr: %w", err)
				}
				srv = &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 10 * time.Second}
				go func() {
					if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
						slog.Error("metrics server", "err", err)
					}
				}()
			}
			err = a.Run(ctx)
			if srv != nil {
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = srv.Shutdown(sctx)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&node, "node", os.Getenv("NODE_NAME"), "node name (default $NODE_NAME, else the host name)")
	f.StringVar(&storeSpec, "store", "", "IPAM store: etcd://HOST:PORT[,HOST:PORT] (or bolt:PATH for one node)")
	f.StringVar(&certFile, "etcd-cert", "", "etcd client certificate")
	f.StringVar(&keyFile, "etcd-key", "", "etcd client key")
	f.StringVar(&caFile, "etcd-ca", "", "etcd CA bundle")
	f.StringVar(&mode, "mode", string(agent.ModeAuto), "host-gw, vxlan, or auto (host-gw on the same L2, vxlan otherwise)")
	f.StringVar(&underlay, "underlay-interface", "", "interface to other nodes (default: that of the IPv4 default route)")
	f.StringVar(&metricsAddr, "metrics-addr", ":9603", "address for /metrics, /healthz and /readyz (empty: none)")
	f.BoolVar(&doInstall, "install", false, "once ready, install the plugins into --bin-dir and write the network config into --conf-dir")
	f.StringVar(&srcDir, "src-dir", "", "where the plugin binaries are (default: cni/ beside the podnet binary)")
	f.StringVar(&networkConfig, "network-config", "", "conflist to install (default: generated for --store); its podnet-ipam gets this node's name")
	f.BoolVar(&uninstallOnExit, "uninstall-on-exit", false, "remove the network config when the agent exits")
	f.DurationVar(&gcInterval, "gc-interval", 5*time.Minute, "how often to release this node's leaked addresses (0: never)")
	f.DurationVar(&gcGrace, "gc-grace", time.Minute, "how long an address's attachment must be missing before GC releases it")
	f.DurationVar(&leaseTTL, "lease-ttl", 10*time.Second, "TTL of the node registration's etcd lease")
	_ = cmd.MarkFlagRequired("store")
	return cmd
}
