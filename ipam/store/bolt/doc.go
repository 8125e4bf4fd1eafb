// Package bolt is the embedded ipam.Store: one bbolt file, the default on a
// single machine, where nothing else need run.
//
// Two ways to use the file:
//
//   - Per operation (the default, for processes that keep the store a
//     while but must share it, like the CLI and the agent): every Get,
//     List and Write takes an exclusive lock on <path>.lock, opens the
//     database, does its one bbolt transaction, closes it and unlocks. Any
//     number of such processes on the node can share the file this way,
//     with plugins that hold it for their one operation.
//     The lock is polled with a short backoff rather than bbolt's own 50 ms
//     retry, and waiting is bounded by the caller's context and
//     Options.LockTimeout; running out gives ipam.ErrUnavailable.
//   - HoldOpen (for one long-lived process that is the file's only user:
//     tests, benchmarks, podnet run; and for a CNI plugin's one IPAM
//     operation, which reads several times before it writes once and
//     closes a millisecond later): the lock is taken once at Open and
//     the database stays mapped. Concurrent Write calls are group-committed:
//     whatever queued while one commit was syncing goes into the next bbolt
//     transaction, each request with its own compares, so a burst costs one
//     fsync instead of one each.
//   - HoldOpen with AckApplied (the podnet plugin's ADD): a Write returns
//     once applied in the open bbolt transaction, before its commit; Sync
//     (or Close) waits for the commit and reports a failure, which fails
//     every later call too. Reads wait for pending commits. The caller
//     overlaps the fsyncs with other work and reports nothing before Sync.
//
// Revisions: one counter stored in the file, incremented by each write;
// every key stores its mod and create revision before its value (the
// create revision is not exposed: ipam.KV has none). The store applies
// writes through an internal multi-key txn (apply.go), which the group
// commit uses; ipam.Store offers single-key Writes only.
// Each change is also appended to a log bucket that keeps the last
// Options.LogRetain revisions, and Watch reads that log. A watcher sees
// writes made through the same Store at once, and writes from other
// processes within Options.PollInterval (it polls the log). A watch that
// falls more than LogRetain revisions behind ends with ipam.ErrCompacted.
//
// The package must not be imported by ipam itself; it implements the
// interface, nothing more.
package bolt
