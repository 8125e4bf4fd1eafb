// Package cluster runs a Kubernetes cluster for podnet's tests on one
// machine: etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler on the first node, and on every node a containerd and a
// kubelet. Each node has a network namespace of its own on a shared
// underlay (a bridge in the outside network's namespace), so every port,
// route, iptables chain and nft table they or podnet make vanishes with
// it, and a mount namespace of its own in which the machine paths a node
// writes (/opt/cni/bin, /etc/cni/net.d, /var/lib/cni, /var/lib/podnet,
// /run/netns, ...) are the node's own directories: podnet's DaemonSet is
// applied with its hostPaths as shipped, and two nodes share nothing.
// Sockets, state directories, cgroup roots and resolv.conf are private
// too. The controller manager allocates every Node a /24 of ClusterCIDR
// (podnet's node-CIDR model routes to them), and every node runs a real
// kube-proxy (iptables mode, kube-proxy's default, or nftables:
// WithProxyMode, PODNET_K8S_PROXY_MODE) with an identity of its own, so
// that Services, the kubernetes one that in-cluster configs dial among
// them, work as on a kubeadm node. Deploy applies a variant of
// deploy/kubernetes as a user would (deploy.go): Default, the Kubernetes
// datastore with those podCIDRs, or Etcd, deploy/kubernetes/etcd with the
// cluster's etcd. DeployDNS adds the cluster's DNS as kubeadm does
// (coredns.yaml: CoreDNS, built by dnsbuild/ with only the plugins its
// Corefile uses, and the kube-dns Service at DNSServiceIP, which every
// kubelet's clusterDNS names), except that it forwards nothing: a name
// outside the cluster is NXDOMAIN, and no query leaves the machine.
// Images come from archives built here (a static pause program, podnet's
// image from `make image`, CoreDNS's); nothing is pulled. Everything it
// starts it stops by PID, and it restores what kubelet changes on the
// machine; a reaper process does the same if the test process dies first
// (reaper.go). Components can be restarted or killed by PID (restart.go),
// and what podnet keeps per pod on a node and in the store can be
// inspected (inspect.go, nodestate.go).
package cluster
