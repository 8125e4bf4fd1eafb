// Package flowapi is the HTTP side of an agent's flow ring: Handler
// serves GET /flows (NDJSON: the recent records a filter selects, then
// with follow=true the live ones), and Client reads it from one agent,
// directly or through the API server's pod proxy. It must not know
// where records come from (agent/flowcap) nor how several agents'
// records are merged (the CLI does that).
package flowapi
