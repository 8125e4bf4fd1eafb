// Package nftelem reads single elements of nftables sets and maps by
// key, without listing the set: the non-dump NFT_MSG_GETSETELEM request
// that `nft get element` sends. The kernel answers it with the element
// (key, data, comment) or ENOENT, at a cost that does not grow with the
// set, where a listing (google/nftables GetSetElements, a netlink dump)
// reads and parses every element.
//
// A Get sends all its requests in one write and reads the answers: one
// round trip however many keys (up to a chunk's worth). Each key is a
// request of its own, since the kernel stops a multi-element request at
// the first missing key. Each set asked about is probed (NFT_MSG_GETSET)
// in the same write, so that a missing set or table, which the kernel
// also reports as ENOENT, is told apart from a missing key on every
// kernel, extended acks or not.
//
// The socket can be one google/nftables lasting connection uses (On,
// Lasting): a DEL then opens, and closes, no second nftables socket
// (closing one waits for the kernel's deferred nftables work). Get never
// leaves an answer unread on it.
//
// Hash sets and maps only: an interval set's elements are ranges, which a
// key lookup does not return as such. The package knows no table's
// contents, and it never writes.
package nftelem
