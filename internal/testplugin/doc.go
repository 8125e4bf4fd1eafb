// Command testplugin is a configurable fake CNI plugin that the runtime's
// tests execute. It does no networking: it records how it was called and
// then behaves as its configuration says, including in every way a real
// plugin must not (crash, print garbage, hang, leave a child behind).
//
// It deliberately does not use cni/skel: a fake must be able to break
// every rule skel enforces, and must record invocations that skel would
// refuse. It only reads the CNI_* variables it needs and validates
// nothing it is not told to.
//
// Configuration fields, read from the JSON on stdin (all optional):
//
//	"record": "/dir"       write one JSON file per invocation into dir
//	                       (see package record): verb, CNI_* environment,
//	                       stdin, pid and network namespace. Written first, so crashing runs are
//	                       recorded too. $PODNET_TESTPLUGIN_RECORD is used
//	                       when the field is absent (and for VERSION).
//	"result": {...}        ADD prints this object byte for byte, in
//	                       whatever cniVersion it is written in.
//	"ifname": "eth0"       without "result", ADD prints the prevResult
//	                       (converted to cniVersion) or an empty result,
//	                       plus an interface of this name (default
//	                       CNI_IFNAME) in CNI_NETNS
//	"ip": "10.0.0.2/24"    ... and this address on that interface
//	"fail": {"ADD": {"code": 7, "msg": "...", "details": "..."}}
//	                       print that CNI error for the verb and exit 1
//	"sleep": "2s"          sleep before acting; or per verb:
//	                       {"ADD": "2s", "DEL": "100ms"}
//	"crash": "ADD"         exit 2 with text on stderr and nothing on stdout
//	"garbage": "ADD"       print non-JSON and exit 0
//	"null": true           ADD prints null and exits 0
//	"spawnChild": true     start a child in the plugin's process group that
//	                       sleeps "childSleep" (default 60s) and write its
//	                       pid to the record dir (record.ChildPIDs)
//	"childHoldsOutput": true  the child inherits stdout and stderr
//	"ignoreTerm": true     the plugin and its child ignore SIGTERM, so that
//	                       only SIGKILL ends them
//
// "crash" and "garbage" take a verb, a list of verbs, or "*" for all.
// The order is: record, ignore SIGTERM, spawn child, sleep, crash,
// version check, fail, garbage, then the verb's normal output.
//
// $PODNET_TESTPLUGIN_VERSIONS (comma-separated) limits the versions the
// plugin reports for VERSION and accepts in cniVersion, to play an old
// plugin; by default it supports cni.SupportedVersions. STATUS, GC, DEL
// and CHECK print nothing and succeed unless configured otherwise.
package main
