// Package clusterstatus is `podnet status`'s cluster view, its pure
// part: from what the CLI read (the Nodes, the agent DaemonSet's pods,
// each agent's /status document, the control objects on the API) it
// judges what is wrong, in words, node by node, and renders the report
// as text or JSON. It does no I/O: listing, proxying to the agents and
// discovery are the CLI's (cmd/podnet/clusterstatus.go).
package clusterstatus
