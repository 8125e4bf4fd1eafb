// Package agentsock is an ipam.Store served by the node's agent on a unix
// socket: option 2 of docs/design/kubernetes-ipam.md section 4.2. The
// plugin still runs the allocator; it opens the store as
// "agent:/run/podnet/ipam.sock" and each Get, List and Write becomes one
// request and one answer on a connection it keeps until Close. The agent
// serves any ipam.Store (the Kubernetes store, in model B) behind a cache
// of Get results, so that a steady-state ADD reads nothing from the API
// and writes one block.
//
// The wire is a length-prefixed binary frame each way, no HTTP and no
// JSON: the client links nothing but package net, which a plugin links
// anyway (internal/execcost's test keeps it so). A request carries the
// caller's deadline, so the server's call to its backend ends when the
// plugin stops waiting, and whether the caller asked for a fresh read
// (ipam.FreshRead). An answer carries the error's identity (ErrNotFound,
// ErrConflict, ErrUnavailable, ErrWrite, ErrCompacted, ErrDenied,
// errors.ErrUnsupported) and its message. Requests carry a protocol
// version; one of another version (a plugin and an agent of different
// podnet releases, during an upgrade) is refused as unsupported, with a
// message naming both.
//
// The cache (server side) holds, per key, the KV at the revision the
// backend last returned: filled by Get, written through by a successful
// Write (the new revision is the Write's answer), dropped by a Write that
// conflicts or fails (so the allocator's retry reads the backend), and
// bypassed (and refreshed) by a Get with ipam.FreshRead. A write made
// behind the server's back, by another node or the CLI, therefore costs
// one conflict and one read. A List does not fill the Get cache (a list
// of every block would fill it with other nodes' blocks), and reads the
// backend, except for the prefixes named in Options.CachedLists (the
// pools', which every AutoAssign lists): their answers are served for a
// TTL, evicted by a write through the server under the prefix; a change
// behind the server's back is seen within the TTL (a List has no
// revision to check a write against). FreshRead bypasses both caches.
//
// Server.Store is the same backend through the same caches, for the
// agent's own calls in process (its GC, its removal of deleted nodes): the
// node then has one write path, and the cache sees the agent's writes as
// it sees the plugins'.
//
// What the package must not do: retry a Write (the allocator's
// compare-and-swap retries make that safe; the store cannot know whether
// a write it lost the answer to was applied), or answer from the cache a
// Get that asked for a fresh read. The client is no ipam.Watcher: the
// agent watches, the plugin does not.
package agentsock
