package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/client-go/rest"

	"github.com/podnet/podnet/agent"
	"github.com/podnet/podnet/agent/cniinstall"
	"github.com/podnet/podnet/agent/kubeblocks"
	"github.com/podnet/podnet/agent/source/kubeapi"
	"github.com/podnet/podnet/ipamcni"
)

const (
	datastoreEtcd       = "etcd"
	datastoreKubernetes = "kubernetes"
	ipamNodeCIDR        = "node-cidr"
	ipamBlocks          = "blocks"
)

// datastoreConfig checks the datastore flags and sets cfg up for the one
// chosen (the API server's address is read later, in run). For the
// Kubernetes datastore it returns the node-CIDR install settings.
func (ao *agentOptions) datastoreConfig(cfg *agent.Config) (*cniinstall.NodeCIDR, error) {
	switch ao.datastore {
	case datastoreEtcd:
		if ao.storeSpec == "" {
			return nil, errors.New(`required flag "store" not set (or --datastore kubernetes)`)
		}
		if ao.kubeconfig != "" || len(ao.clusterCIDRs) > 0 || (ao.ipamModel != "" && ao.ipamModel != ipamNodeCIDR) {
			return nil, errors.New("--kubeconfig, --cluster-cidr and --ipam go with --datastore kubernetes")
		}
		return nil, nil
	case datastoreKubernetes:
	default:
		return nil, fmt.Errorf("--datastore %q: want etcd or kubernetes", ao.datastore)
	}
	switch ao.ipamModel {
	case ipamBlocks:
		return nil, ao.blocksConfig(cfg)
	case ipamNodeCIDR, "":
	default:
		return nil, fmt.Errorf("--ipam %q: want %s or %s", ao.ipamModel, ipamNodeCIDR, ipamBlocks)
	}
	if ao.storeSpec == "" {
		ao.storeSpec = ipamcni.DefaultStore
	}
	if !strings.HasPrefix(ao.storeSpec, "bolt:") {
		return nil, fmt.Errorf("--store %q: with --datastore kubernetes each node keeps its addresses in a local bolt:PATH", ao.storeSpec)
	}
	var cidrs []netip.Prefix
	for _, s := range ao.clusterCIDRs {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil || p != p.Masked() {
			return nil, fmt.Errorf("--cluster-cidr %q: want a network prefix such as 10.244.0.0/16", s)
		}
		cidrs = append(cidrs, p)
	}
	if ao.doInstall && len(cidrs) == 0 {
		// The ConfigMap's cluster_cidr, empty: the agent runs degraded.
		return nil, &agent.ConfigError{Key: "cluster_cidr", Value: strings.Join(ao.clusterCIDRs, ","),
			Want: "want the cluster's pod CIDRs: --datastore kubernetes --install needs --cluster-cidr, since traffic between pods of different nodes must not be masqueraded"}
	}
	cfg.Kube = &agent.KubeConfig{}
	return &cniinstall.NodeCIDR{Store: ao.storeSpec, ClusterCIDRs: cidrs}, nil
}

// restConfig reads --kubeconfig, or without it the pod's in-cluster
// config (the service account's token and CA, and the API server at
// $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT).
func (ao *agentOptions) restConfig() (*rest.Config, error) {
	return kubeRESTConfig(ao.kubeconfig, false)
}

// blocksConfig sets cfg up for block IPAM on the API: the pools to seed
// come from the conflist the agent installs, whose store is the socket
// the agent serves (--ipam-socket).
func (ao *agentOptions) blocksConfig(cfg *agent.Config) error {
	if ao.storeSpec != "" || len(ao.clusterCIDRs) > 0 {
		return errors.New("--ipam blocks: --store and --cluster-cidr do not apply (the store is the API, and the conflist's pools are the cluster's)")
	}
	if ao.doInstall && ao.networkConfig == "" {
		return errors.New("--ipam blocks --install needs --network-config: the conflist whose pools the agent creates")
	}
	kb := &agent.KubeBlocks{}
	if ao.networkConfig != "" {
		pools, err := cniinstall.ConflistPools(ao.networkConfig)
		if err != nil {
			return fmt.Errorf("--network-config: %w", err)
		}
		kb.Pools = pools
	}
	cfg.Kube = &agent.KubeConfig{Blocks: kb}
	return nil
}

// runBlocks runs the agent with block IPAM on the API: its own store on
// the API (pools, GC) and, with --install, the socket the plugins
// allocate through.
func (ao *agentOptions) runBlocks(ctx context.Context, cfg agent.Config) error {
	// The store's requests (every plugin's, through the socket) are
	// counted with the agent's own.
	cfg.Kube.Requests = kubeapi.NewRequestCounter()
	store, err := kubeblocks.OpenStore(cfg.Kube.REST, "", cfg.Kube.Requests.Wrap)
	if err != nil {
		return err
	}
	defer store.Close()
	cfg.Store = store
	if cfg.Install != nil {
		cfg.Kube.Blocks.Socket = ao.ipamSocket
	}
	return ao.runAgent(ctx, cfg)
}
