// Package sysctlrecord keeps the record of the node-wide sysctls podnet
// changed: before a setting is first changed, its original value is
// written to a small JSON file under podnet's state directory
// (/var/lib/podnet/sysctls.json), so that removing podnet (nodeclean)
// restores exactly the settings podnet changed, and nothing it found
// already as it wanted.
//
// It reads and writes that file and /proc/sys, nothing else. It must not
// decide which settings a node needs: its callers do.
package sysctlrecord
