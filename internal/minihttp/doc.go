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
// no retries of a request that may have reached the server (only one
// whose write failed on a reused connection is sent again, as net/http
// does), and nothing beyond the standard library and golang.org/x/sys.
package minihttp
