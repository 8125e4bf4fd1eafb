// Package skel is the plugin side of the CNI specification 1.1.0, shared
// by every podnet plugin binary. It reads and validates the CNI_*
// environment and the network configuration on stdin, negotiates the
// version, checks CNI_NETNS before any handler runs, calls the handler
// for the verb, and writes the one document stdout may carry: a result,
// a version report, or an error.
//
// The plugin's own code (Plugin's handlers) does the networking. skel
// must not: it never enters a namespace and never changes the system.
// It must never print anything on stdout but the specification's
// documents; everything else goes to stderr.
package skel
