// Package flows is the model of podnet's flow records (issue 32): one
// record per connection the node's pods take part in, with the verdict
// the node's data path gave it (forwarded, dropped by policy, dropped by
// the source guard) and the policy rules that decided it; the bounded
// ring an agent keeps them in, the filters a client asks with, and the
// subscriptions of follow mode. Pure: no netlink, no HTTP.
package flows
