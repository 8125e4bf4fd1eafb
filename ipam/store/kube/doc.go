// Package kube is an ipam.Store over the Kubernetes API: the allocator's
// pools, blocks and node indexes kept as the custom resources of
// deploy/kubernetes/crds (IPPool, IPAMBlock, IPAMNode; group podnet.io,
// version v1, cluster-scoped), for the plugin that runs the allocator in
// process (docs/design/kubernetes-ipam.md, sections 1.2 and 4.1).
//
// It is encoding/json over internal/minihttp and crypto/tls: no client-go
// and no net/http, which every plugin exec would pay for (internal/
// execcost's test keeps it so). Custom resources have no protobuf
// encoding, so JSON is what the API speaks for them anyway.
//
// Keys map to objects, and nothing else is stored:
//
//	<prefix>ipam/pools/<name>    IPPool <name>
//	<prefix>ipam/blocks/<cidr>   IPAMBlock cidrName(cidr), e.g. 10-244-1-64-26
//	<prefix>ipam/nodes/<node>    IPAMNode <node>
//
// An object's spec is the value, verbatim JSON (the API server may reorder
// its fields). ModRevision is the object's resourceVersion, which must be
// a decimal integer (etcd's revision, on every etcd3-backed API server);
// it is an equality token only. Every write is one request: a create
// (POST) for ModRevision 0, an update (PUT) carrying the resourceVersion,
// a delete with a resourceVersion precondition. Reads are quorum reads.
//
// A key prefix other than ipam.DefaultPrefix is a separate set of objects
// in the same resources, for tests: names gain "<set>." and every object
// the label podnet.io/ipam-set=<set>, set being the first 10 hex digits
// of sha256(prefix); lists select on the label, or on its absence for
// the default prefix. Blocks carry podnet.io/node=<node> while affine to a
// node whose name is a valid label value.
//
// The store must not retry a write that may have reached the server: the
// allocator's compare-on-resourceVersion retries make that safe. It
// resends only what the server refused before running it (a 429, a 401
// after re-reading the token file). It does not implement ipam.Watcher:
// agents follow the podnet.io resources with informers. A read of a key
// that is no pool, block or node key finds nothing; a write of one is
// refused.
package kube
