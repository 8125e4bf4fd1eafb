// Package flowui is `podnet ui`'s web page: an http.Handler that serves
// one embedded page (HTML, vanilla JavaScript and CSS, nothing fetched
// from elsewhere) and /api/flows, the flows API of the agents (the same
// query parameters and the same NDJSON records) read through a Source.
//
// The page shows the live flow table with its filters and a map of
// namespaces and pods whose edges are coloured by verdict. It is meant
// for a loopback address only: LoopbackAddr checks the address to listen
// on, and the handler answers only requests whose Host is a loopback
// address or localhost (a page of another site cannot reach it through
// DNS rebinding).
//
// The package must not capture or store flows; where records come from
// is the Source's business (AgentSource reads agents' /flows by URL).
package flowui
