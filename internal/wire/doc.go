// Package wire is the framing of the agent's unix-socket protocols (the
// IPAM store's, ipam/store/agentsock, and the policy handshake's,
// agent/netpol/admitsock): a frame is a big-endian uint32 length and that
// many bytes of big-endian fields, written with Enc and read with
// ReadFrame and Dec. Each protocol defines its own fields and limits;
// this package only spares them writing the encoding twice.
package wire
