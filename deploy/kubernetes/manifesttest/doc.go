// Package manifesttest checks podnet's Kubernetes manifests in
// deploy/kubernetes (the etcd model) and deploy/kubernetes/node-cidr (the
// node-CIDR model, the Kubernetes API as datastore): every document
// decodes strictly into its Kubernetes API type, the DaemonSet,
// ConfigMap, ServiceAccount and RBAC agree with each other and with
// deploy/Containerfile, and the network config each ConfigMap carries,
// as the agent installs it, is one podnet accepts.
//
// It is a module of its own so that the main module's go.mod does not
// carry the API machinery's test-only dependencies; it uses podnet's
// packages through a replace directive. It has tests only.
package manifesttest
