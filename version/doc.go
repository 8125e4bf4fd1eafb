// Package version is the running podnet's version: the release it was
// built as (`make release VERSION=x.y.z` and `make build` stamp it with
// the linker, from the VERSION file at the top of the tree), the commit,
// and the toolchain. Every binary reports the same: `podnet version`, the
// agent's log line at start, its /readyz and /status, and the metric
// podnet_build_info.
package version
