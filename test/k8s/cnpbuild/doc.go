// Package cnpbuild holds nothing to run: its test file imports what the
// test files of sigs.k8s.io/network-policy-api/conformance import, so
// that `go mod tidy` keeps every module `go test -c
// sigs.k8s.io/network-policy-api/conformance` needs in this module's
// go.sum.
package cnpbuild
