// Package cni is podnet's implementation of the runtime side of the CNI
// specification 1.1.0: the spec's types for versions 0.3.0 to 1.1.0 and the
// conversions between them, network configuration loading and validation,
// and Runtime, which finds, configures and executes plugins, chains them,
// and keeps the result cache that DEL, CHECK and GC depend on.
//
// The package does no networking itself: that is the plugins' job. It
// enters a network namespace only to start plugins in a configured host
// namespace (RawExec.HostNetNS).
package cni
