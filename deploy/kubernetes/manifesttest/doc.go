// Package manifesttest checks podnet's Kubernetes manifests in
// deploy/kubernetes: every document decodes strictly into its Kubernetes
// API type, the DaemonSet, ConfigMap and ServiceAccount agree with each
// other and with deploy/Containerfile, and the network config the
// ConfigMap carries is one podnet accepts.
//
// It is a module of its own so that podnet's main module does not depend
// on k8s.io; it uses podnet's packages through a replace directive. It
// has tests only.
package manifesttest
