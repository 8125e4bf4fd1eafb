// Package e2e holds podnet's multi-node tests on etcd: the simulated
// network of package e2enet (each node a network namespace on an
// underlay the test builds: a bridge for one L2 segment, or a router
// between one subnet per node; a real `podnet agent` process in every
// node namespace; pods wired by the real podnet plugin), with an etcd
// member inside the underlay's hub namespace (package e2eetcd,
// which the interop module's data-path benchmark shares). The same network
// on the Kubernetes datastore is tested in test/k8s (TestE2EKube), whose
// module builds kube-apiserver.
//
// The agents install deploy's ConfigMap conflist as shipped (masquerade
// on; only the etcd endpoint replaced, and for dual-stack the IPv6 pool
// added as the ConfigMap documents), and the tests check what Kubernetes'
// network model promises: nodes start with forwarding off, as a fresh
// host, and podnet turns it on; every pod reaches every other pod under
// its own address; traffic to a host outside the pools leaves under the
// node's address; pods get the underlay's MTU less the encapsulation of
// the mode (TestMTU: a 9000-byte underlay gives 8950 over VXLAN, 9000 in
// host-gw), so a bulk transfer between nodes needs no ICMP; and once the
// pods are deleted nothing of them is left on the nodes (veths, routes,
// masquerade set elements).
//
// Everything runs as root, only inside namespaces the tests create, with
// underlay addresses from 198.18.0.0/15 and fd00:198:18::/48 and pod
// addresses from 10.244.0.0/16 and fd00:244::/64; every namespace,
// process and directory is removed when a test ends, pass or fail.
package e2e
