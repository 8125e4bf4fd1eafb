// Package sandbox manages the pod sandboxes podnet itself creates for
// `podnet run` and `podnet pod`: a named network namespace plus a small
// record of what it is (its ID for CNI, its pod name, its network) kept
// under a state directory, so that `podnet pod ls`, `pod rm` and `pod gc`
// can find them later.
//
// It does no networking: attaching a sandbox to a network is netplugin's
// job. It must never touch namespaces it did not create.
package sandbox
