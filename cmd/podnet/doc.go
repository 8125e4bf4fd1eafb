// Command podnet is podnet's command line: it inspects and validates CNI
// networks (net), attaches and detaches network namespaces (pod), and, as
// they land, runs processes in pod networks, manages IPAM and runs the node
// agent. It holds no networking logic of its own: every command is a thin
// shell over the library packages.
package main
