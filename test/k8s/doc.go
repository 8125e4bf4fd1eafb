// Package k8s runs podnet on a real Kubernetes node: kube-apiserver,
// kube-controller-manager, kube-scheduler, kubelet and containerd on one
// machine, offline, with podnet deployed from deploy/kubernetes as a user
// would. It is a module of its own so that podnet's module does not
// depend on k8s.io/kubernetes. See package cluster for the harness.
package k8s
