// Package manifesttest checks podnet's Kubernetes manifests, every
// variant of deploy/kubernetes: the default (deploy/kubernetes itself,
// the Kubernetes API as datastore, pods addressed from their Node's
// spec.podCIDRs) and deploy/kubernetes/etcd (block IPAM in etcd). In each,
// every document decodes strictly into its Kubernetes API type, the
// DaemonSet, ConfigMap, ServiceAccount and RBAC agree with each other and
// with deploy/Containerfile, RBAC grants exactly what the agent uses, and
// the network config each ConfigMap carries, as the agent installs it,
// is one podnet-ipam and `podnet net validate` accept. No other directory
// of deploy/kubernetes may hold manifests unless a test here checks it.
// The custom resources of deploy/kubernetes/crds are checked with the API
// server's own validation packages: structural schemas, CEL rules that
// compile within the cost budget, what they refuse, and that the largest
// block fits under etcd's request limit. The ClusterNetworkPolicy CRD of
// deploy/kubernetes/clusternetworkpolicy must equal, byte for byte, the
// experimental channel's file of the network-policy-api module the main
// module requires.
//
// The Helm chart, deploy/helm/podnet, is judged by Helm's own packages
// (helm.sh/helm/v3: loader, values coalescing and schema validation,
// template engine, linter): each of its ci values files renders, object
// for object, the shipped directory it stands for (helm_test.go), its
// values.schema.json refuses bad values naming the field
// (helm_schema_test.go), and values away from the ci files render a
// DaemonSet and a conflist that pass the variants' checks and podnet's
// own parsers (helm_values_test.go).
//
// It is a module of its own so that the main module's go.mod does not
// carry the API machinery's test-only dependencies; it uses podnet's
// packages through a replace directive. It has tests only, and
// cmd/helmpackage, which writes the chart's archive with Helm's packages
// (make helm-package).
package manifesttest
