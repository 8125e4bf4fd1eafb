// Package e2ebuild holds nothing to run: its test file imports what
// k8s.io/kubernetes/test/e2e's own test file imports, so that `go mod
// tidy` keeps every module `go test -c k8s.io/kubernetes/test/e2e` needs
// in this module's go.sum.
package e2ebuild
