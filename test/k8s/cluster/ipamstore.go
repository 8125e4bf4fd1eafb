package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/bolt"
	"github.com/podnet/podnet/ipam/store/etcd"
	"github.com/podnet/podnet/ipam/store/kube"
)

// kubeStore is what ipamStoreOf says for block IPAM on the Kubernetes
// API, where the agent has no --store (the API is the store, and each
// side brings its own credentials).
const kubeStore = "kubernetes:"

// ipamStoreOf is the store the variant's agent and plugins use, as the
// agent's --store names it on a node, $(VAR)s expanded from the
// ConfigMap: etcd://HOST:PORT, or the node-local bolt:PATH; kubeStore
// for an agent with --ipam=blocks.
func ipamStoreOf(m *Manifests) (string, error) {
	for _, ctr := range m.DaemonSet.Spec.Template.Spec.Containers {
		if slices.Contains(ctr.Args, "--ipam=blocks") {
			return kubeStore, nil
		}
		for _, a := range ctr.Args {
			spec, ok := strings.CutPrefix(a, "--store=")
			if !ok {
				continue
			}
			for _, e := range ctr.Env {
				spec = strings.ReplaceAll(spec, "$("+e.Name+")", envValue(m.ConfigMap, e))
			}
			if !strings.HasPrefix(spec, "etcd://") && !strings.HasPrefix(spec, "bolt:/") {
				return "", fmt.Errorf("container %s --store=%s: want etcd://HOST:PORT or bolt:/PATH", ctr.Name, spec)
			}
			return spec, nil
		}
	}
	return "", fmt.Errorf("variant %s: no container of DaemonSet %s has --store=", m.Variant, m.DaemonSet.Name)
}

// envValue is e's value from a literal or from the ConfigMap.
func envValue(cm *corev1.ConfigMap, e corev1.EnvVar) string {
	if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil && e.ValueFrom.ConfigMapKeyRef.Name == cm.Name {
		return cm.Data[e.ValueFrom.ConfigMapKeyRef.Key]
	}
	return e.Value
}

// IPAMStoreSpec is the IPAM store the deployed variant's plugins on the
// node write, as podnet's --store names it from the machine: the
// cluster's etcd (reached from the node's network namespace, see
// Podnet), the node's own bbolt file (the default variant: every node
// has its own), or the Kubernetes API with the admin's credentials (a
// JSON kubeconfig beside the cluster's PKI).
func (n *Node) IPAMStoreSpec() (string, error) {
	c := n.c
	switch {
	case c.deployed == "":
		return "", errors.New("no podnet deployed (Deploy or Apply) on this cluster")
	case strings.HasPrefix(c.deployed, "bolt:"):
		return "bolt:" + n.HostPath(strings.TrimPrefix(c.deployed, "bolt:")), nil
	case c.deployed == kubeStore:
		path := c.pki.path("admin-kubeconfig.json")
		if err := c.WriteJSONKubeconfig(path); err != nil {
			return "", err
		}
		return kubeStore + path, nil
	}
	return c.deployed, nil
}

// OpenIPAMStore opens the store IPAMStoreSpec names. A bbolt file is
// locked only for each call, as the plugins lock it, so they wait for
// the test at most that long.
func (n *Node) OpenIPAMStore(ctx context.Context) (ipam.Store, error) {
	spec, err := n.IPAMStoreSpec()
	if err != nil {
		return nil, err
	}
	if path, ok := strings.CutPrefix(spec, "bolt:"); ok {
		return bolt.Open(ctx, bolt.Options{Path: path})
	}
	if path, ok := strings.CutPrefix(spec, kubeStore); ok {
		// The API server listens on the underlay, reached from every node.
		return kube.Open(kube.Options{Kubeconfig: path, Dial: n.DialContext})
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: strings.Split(strings.TrimPrefix(spec, "etcd://"), ","), DialTimeout: 10 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return n.DialContext(ctx, "tcp", addr)
		})},
	})
	if err != nil {
		return nil, err
	}
	return &etcdStore{Store: etcd.NewFromClient(cli), cli: cli}, nil
}

// etcdStore closes its client with the store.
type etcdStore struct {
	*etcd.Store
	cli *clientv3.Client
}

func (s *etcdStore) Close() error { return s.cli.Close() }
