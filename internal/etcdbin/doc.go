// Package etcdbin gives tests a real etcd server binary without putting
// the etcd server in podnet's module graph: the binary is built from the
// module in ./server (etcd's own entry point, pinned by that module's
// go.sum) the first time a test asks for it, into the user's cache
// directory, and reused while the toolchain and the module's files stay
// the same. Concurrent test binaries wait on a lock; a build cut short is
// never reused (it is renamed into place only when complete).
package etcdbin
