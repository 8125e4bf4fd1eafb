// Command podnet is podnet's command line. It runs commands in pods with
// their own network (run), reports readiness (status), inspects and
// validates CNI networks (net), attaches namespaces to networks and
// detaches them as cnitool does, and lists, removes and garbage-collects
// the sandboxes run made (pod), inspects and repairs the block IPAM
// (ipam), runs the node agent (agent), installs the plugins and the
// network config (install), measures pod set-up and tear-down (bench), and
// serves and fetches inside pods for connectivity checks (diag).
//
// It holds no networking logic of its own: every command is a thin shell
// over the library packages.
package main
