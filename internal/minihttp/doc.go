// Package minihttp is a small HTTP/1.1 client for the IPAM stores that
// short-lived plugin processes link (ipam/store/etcdgw, ipam/store/kube):
// one request with an optional body, a status, a few headers, and a body
// with a length, in chunks, or up to the close (a stream), over TCP or
// crypto/tls, with idle connections kept per host.
//
// It exists so that those stores need not link net/http: every plugin
// exec pays for the packages it links, and net/http's initialisation and
// pages cost the podnet plugin about a quarter of a millisecond per exec,
// for features (HTTP/2, proxies, cookies, redirects, compression) the
// stores do not use. It must stay that small: no redirects, no proxies,
// and nothing beyond the standard library and golang.org/x/sys.
//
// What it does for robustness, and no more:
//
//   - Idle connections are few and short-lived (DefaultMaxIdle,
//     DefaultIdleTimeout: a plugin lives for one CNI verb), and one is
//     reused only if a read that does not wait finds it open and silent,
//     read through TLS when there is TLS: bytes the server sent unasked,
//     its close_notify or its close end the connection; records without
//     data (session tickets) do not.
//   - A request that fails on a reused connection because the server
//     closed it goes once more, on a new connection, if it cannot have
//     reached the server (its write failed) or if it is idempotent by its
//     method and not a byte of answer came back. Nothing else is retried:
//     a request that may have run is the caller's to judge.
//   - What a server can make it read before a body is bounded: line
//     length, header and trailer count, interim responses (proto.go);
//     passing a bound is an error naming it.
package minihttp
