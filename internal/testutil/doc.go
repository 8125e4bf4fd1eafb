// Package testutil holds helpers for podnet's tests: the root-test gate,
// throw-away network namespaces, and building the plugin binaries that
// tests execute.
//
// It is imported only from _test.go files. It must not create anything a
// test does not remove in t.Cleanup, and must not touch namespaces,
// links or files it did not create.
package testutil
