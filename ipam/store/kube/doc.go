// Package kube is an ipam.Store over the Kubernetes API: the allocator's
// pools, blocks and node indexes kept as the custom resources of
// deploy/kubernetes/crds (IPPool, IPAMBlock, IPAMNode; group podnet.io,
// version v1, cluster-scoped) (docs/design/kubernetes-ipam.md, sections
// 1.2 and 4.1). Its users are the node agent in block IPAM (model B),
// which serves its node's plugins through ipam/store/agentsock and runs
// GC and pool seeding on it, the CLI (a "kubernetes:KUBECONFIG" store
// spec), and a plugin whose ipam.store names a kubeconfig directly.
//
// It is encoding/json, and by default internal/minihttp and crypto/tls
// with a kubeconfig's token or client certificate (Kubeconfig is the one
// kubeconfig type podnet parses and renders): no client-go and no
// net/http, which every plugin exec would pay for (internal/execcost's
// test keeps it so). A caller that has a client for the API server (the
// agent, the CLI: client-go's, with HTTP/2 and every credential it
// knows) gives it as Options.Transport instead; ipam/store/kube/kubehttp
// makes one of an http.RoundTripper. Custom resources have no protobuf
// encoding, so JSON is what the API speaks for them anyway. On minihttp,
// a plugin keeps its idle limits; a long-lived caller serving concurrent
// requests sets Options.MaxIdleConns.
//
// Keys map to objects, and nothing else is stored:
//
//	<prefix>ipam/pools/<name>    IPPool <name>
//	<prefix>ipam/blocks/<cidr>   IPAMBlock cidrName(cidr), e.g. 10-244-1-64-26
//	<prefix>ipam/nodes/<node>    IPAMNode <node>
//
// An object's spec is the value, verbatim JSON (the API server may reorder
// its fields). Every write is one request: a create (POST) for
// ModRevision 0, an update (PUT) carrying the resourceVersion, a delete
// with a resourceVersion precondition.
//
// Reads: a Get, and a List of blocks or nodes, are consistent reads (no
// resourceVersion: the latest state). A List of pools is served from the
// API server's watch cache as it is (resourceVersion=0), a moment old
// perhaps, unless ctx carries ipam.FreshRead: every allocation lists the
// pools, and a stale pool list can pick a pool just disabled, never an
// address that is taken (addresses are decided by the block's
// compare-and-swap).
//
// Revisions: Kubernetes says a resourceVersion is an opaque string, to
// be compared for equality only; the allocator's ModRevision is an int64
// equality token. The store maps one to the other (revision.go) without
// reading anything into the string, and a write sends back the very
// string the server gave, so the compare-and-swap is the API server's own
// precondition, on the string. A resourceVersion in canonical decimal
// form (an etcd revision, on every etcd3-backed API server) is its own
// ModRevision, the same in every process. Any other gets a token at or
// above 1<<62, for its object, that only this Store knows, for the last
// few thousand tokens it handed out; a write at a token it does not know
// for that object is a conflict, and the allocator reads the object
// again. Nothing else in podnet carries a ModRevision from one process to
// another (the agent's socket hands its own Store's tokens back to it),
// so the interface did not change.
//
// Errors, whatever the transport: a 409 matches ipam.ErrConflict (the
// allocator reads again and retries), a 404 ipam.ErrNotFound. A 401 or a
// 403 matches ipam.ErrDenied (the allocator does not retry it; the plugin
// reports CNI code 7), with a message naming the status and what to
// check: the credentials (the kubeconfig's, or those Options.Kubeconfig
// names for a Transport), or the RBAC rules bound to their user. 410, 429 and 5xx
// answers, and a server that cannot be reached, match
// ipam.ErrUnavailable, which the allocator retries until its deadline.
// Anything else (a 422 from the CRDs' validation) is an *APIError with
// the API's message.
//
// A key prefix other than ipam.DefaultPrefix is a separate set of objects
// in the same resources, for tests: names gain "<set>." and every object
// the label podnet.io/ipam-set=<set>, set being the first 10 hex digits
// of sha256(prefix); lists select on the label, or on its absence for
// the default prefix. Blocks carry podnet.io/node=<node> while affine to a
// node whose name is a valid label value.
//
// The store must not resend a request that may have reached the server:
// the allocator's compare-on-resourceVersion retries make that safe. It
// resends only what the server refused before running it: on minihttp, a
// 401 once after re-reading the token file (a Transport refreshes its own
// credentials), and a 429 after its Retry-After (at least minPause) when
// that fits in the caller's deadline. A 429 holds back every request of
// the Store until its Retry-After has passed, so the allocator's own
// retries, which come sooner, fail at once instead of reaching a server
// that asked for a pause. (minihttp resends, once, what a kept connection
// lost as the server closed it: a request that never left, or an
// idempotent one.) The store does not implement ipam.Watcher: agents
// follow the podnet.io resources with informers. A read of a key that is
// no pool, block or node key finds nothing; a write of one is refused.
package kube
