// Package etcdgw is an ipam.Store over etcd's v3 JSON gateway (the
// grpc-gateway every etcd member serves under /v3/), for the short-lived
// plugin processes that do IPAM in-process.
//
// The full etcd client (ipam/store/etcd) costs a plugin about 4 ms of
// package initialisation and 10 MB of memory on every exec; this client is
// encoding/json and a small HTTP/1.1 client (internal/minihttp: not even
// net/http, whose initialisation and pages cost the podnet plugin about a
// quarter of a millisecond per exec), with crypto/tls for https members.
// The node agent and the CLI, which live long, use the full client; both
// pass the same store suite, over plain HTTP and over TLS with client
// certificates.
//
// It fails over between endpoints when one cannot be dialled. It must not
// retry a request that may have reached the server: the allocator's
// compare-on-revision retries are what make a repeated transaction safe.
package etcdgw
