// Package nftlayout records the layout version of each nftables table
// podnet owns in the table itself, and reads it back before a writer
// rebuilds, flushes or deletes anything there.
//
// The version is the name of an empty marker set in the table,
// "layout-v<N>": google/nftables v0.3.0 can write neither a table's user
// data nor read a set's comment back, and a name is also what `nft list
// table` shows an operator. A table without a marker was written before
// markers existed, and counts as older than every version.
//
// The rule every writer follows: a table whose marker is newer than the
// version the writer knows is left as it is (nothing added to its
// declaration, flushed, replaced or deleted) and the writer fails with a
// *NewerError naming the table and both versions; a table of the same or
// an older version is adopted (the writer's batch adds its own marker)
// and converged as before. A newer podnet whose layout an older one can
// still maintain keeps the version; one that changes what the elements of
// a set mean renames the set, since adding an element to a set of a name
// it knows is the one write an older plugin makes without reading the
// marker (so that a pod's ADD costs no extra round trip).
//
// The package knows tables and versions only: no table's contents.
package nftlayout
