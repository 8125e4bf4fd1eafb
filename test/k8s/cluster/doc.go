// Package cluster runs a Kubernetes cluster for podnet's tests on one
// machine: etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler on the first node, and on every node a containerd, a
// kubelet and a kube-proxy. Each node has a network namespace of its own on a shared
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
// datastore with those podCIDRs, Etcd, deploy/kubernetes/etcd with the
// cluster's etcd, or Blocks, deploy/kubernetes/blocks (block IPAM on the
// Kubernetes API). DeployDNS adds the cluster's DNS as kubeadm does
// (coredns.yaml: CoreDNS, built by dnsbuild/ with only the plugins its
// Corefile uses, and the kube-dns Service at DNSServiceIP, which every
// kubelet's clusterDNS names), except that it forwards nothing: a name
// outside the cluster is NXDOMAIN, and no query leaves the machine.
// Images come from archives built here (a static pause program, podnet's
// image from `make image`, CoreDNS's); nothing is pulled. Everything it
// starts it stops by PID, and it restores what kubelet changes on the
// machine; a reaper process does the same if the test process dies first
// (reaper.go); with PODNET_K8S_KEEP=1 (or =failed) it leaves the
// cluster running instead and logs how to reach it and how to have the
// reaper remove it (keep.go).
//
// Cluster holds what is cluster-wide: the API client and Config,
// deploying podnet and the DNS add-on, loading images into every node,
// the components' PIDs and log tails, teardown. Whatever looks at or
// acts on one node is a method of Node, and a test names the node it
// means (c.Nodes[0], or a loop over c.Nodes): its links, nftables
// elements and IPAM records (nodestate.go), its sandboxes, CRI exec,
// podnet's CLI, CNI cache entries and pinned namespaces (inspect.go),
// its containerd's view of itself and its metrics (containerd_info.go,
// metrics.go), restarting or killing its containerd or kubelet by PID
// (restart.go), the IPAM store its plugins write (ipamstore.go), its
// files (HostPath), and dialing or running commands from its namespaces
// (node.go). The control plane listens in the first node's network
// namespace, reachable from every node over the underlay.
//
// Every file of a cluster is below Dir (a podnet-k8s-* directory in
// $TMPDIR): the components' logs in Dir/logs/<component>.log (a node's
// other than the first as <component>@<node>.log), each node's files in
// Dir/nodes/node-<i>, its pods' container logs in that node's pod-logs
// (PodLogsDir). Dir goes at teardown; a failed test logs the tails of
// the API server's, containerd's, kubelet's and podnet's agents' logs
// first (LogTails). test/k8s/README.md says how to run a test, keep a
// cluster and find each log. The package must not touch what it did not
// make: it stops processes by PID only, and restores the machine's
// sysctls and directories as it found them.
package cluster
