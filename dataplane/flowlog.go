package dataplane

// FlowLogGroup is the NFLOG group of the flow verdicts' drops (issue
// 32): the source guard's (GuardLogPrefix) and, by default, the policy
// table's ("podnet-flow <id>", package policyrules). The agent's flow
// capture listens on it; unread, a record costs the kernel nothing more
// than the packet's drop.
const FlowLogGroup = 7371

// GuardLogPrefix is the NFLOG prefix of a packet the source guard drops.
const GuardLogPrefix = "podnet-guard"
