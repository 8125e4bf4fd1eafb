// Package cluster runs a single-node Kubernetes cluster for podnet's
// tests: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
// containerd and kubelet, all in a network namespace of the node's own
// (so every port, route, iptables chain and nft table they or podnet
// make vanishes with it), with private sockets, state directories,
// cgroup root, CNI directories and resolv.conf. Images come from archives
// built here (a static pause program, and podnet's image from `make
// image`); nothing is pulled. Everything it starts it stops by PID, and
// it restores what kubelet changes on the machine; a reaper process does
// the same if the test process dies first (reaper.go). Components can be
// restarted or killed by PID (restart.go), and what podnet keeps per pod
// on the node and in the store can be inspected (inspect.go,
// nodestate.go).
package cluster
