// Package netpol is the agent's policy service: it enforces NetworkPolicy
// (networking.k8s.io/v1) and ClusterNetworkPolicy
// (policy.networking.k8s.io/v1beta1) for this node's pods, in the
// kernel, by keeping the node's nftables table (dataplane/policyrules)
// equal to the policy that policy.Compile computes from the cluster.
//
// Four informers always feed it (sources.go): every NetworkPolicy, every
// Namespace, every unfinished Pod of the cluster (peers are on any node)
// and every Node (this node's addresses: traffic from a pod's own node
// is always allowed in; every node's labels and InternalIP and
// ExternalIP addresses: ClusterNetworkPolicy's nodes peers). Each one's
// transform (slim.go) keeps only what policy reads, and the Pod cache
// holds policy.Pod values themselves, pods with equal labels or named
// ports sharing one map or list (share.go: a Deployment's pods have
// their template's), so a remote pod costs the agent a few hundred bytes
// (BenchmarkPodCacheMemory); a Node costs its name, labels and two or
// so addresses. The node's global addresses in
// its network namespace are added to its own Node's (a node sends from
// any of them).
//
// A fifth informer follows every ClusterNetworkPolicy
// (clusterpolicies.go), its cache holding policy.ClusterPolicy values
// (policy.ClusterPolicyFromAPI), while the API server serves them: their
// CRD is optional, and the service must enforce NetworkPolicy without
// it. It asks discovery (a GET of /apis/policy.networking.k8s.io/v1beta1)
// when Run starts and every CRDRecheck (30 s) after: when the resource
// is served at start the informer is waited for like the others (a
// first apply without an Admin Deny would open what it closes); when it
// is not, or discovery fails, the informer is not started at all, so it
// can hold neither Ready nor the first apply back, and a CRD installed
// later is followed from the next check on. A CRD removed stops the
// informer and its policies' rules go; removed before the informer
// synced, it stops the wait for it too. One discovery request waits 10 s
// at most. The experimental channel's CRD
// is the one to install (deploy/kubernetes/clusternetworkpolicy): the
// standard one prunes nodes peers and named ports before podnet sees
// them.
//
// On a change (service.go) the service waits Debounce (10 ms: one window
// from the first event, not sliding, so a stream of events cannot hold
// the rules back), builds a Snapshot (snapshot.go), compiles it for this
// node and applies the difference in one batch; a pod's deletion waits
// DeleteDebounce (100 ms) instead, so that deletions, whose commits wait
// for a kernel grace period, go a batch at a time (deletions.go). Updates
// that change nothing policy reads (pod status) cost nothing. Every ResyncInterval
// the table is rewritten whole, to repair a change made behind the
// agent's back. A failed apply is retried with backoff; Ready says why
// it failed, and is not ready before the informers synced and the first
// apply succeeded.
//
// Admit (admit.go) is CNI ADD's first-packet handshake: it returns once
// the pod's addresses, told by ADD before the API has them, are in the
// rules, or at once when no policy selects the pod: no NetworkPolicy of
// its namespace and no ClusterNetworkPolicy with rules (a pod either
// selects gets chains of its own). Admission
// (admission.go) serves it to the node's plugins on a unix socket
// (admitsock), and opens the pods plugins closed when they got no
// answer (dataplane.Closed) once Admit has returned for them.
//
// Metrics (metrics.go): compile, apply and event-to-enforced latency,
// apply errors, isolated pods, sets and elements, and the kernel's
// packet counters read at scrape time: allowed by policy rule, denied by
// namespace and direction, and matched by ClusterNetworkPolicy rule
// (tier, policy, action, direction, rule index).
//
// The deny log (denylog.go, Config.DenyLog, off by default): the pod
// chains log what they drop to an NFLOG group under the node's rate
// limit, and the service reads the group (dataplane/nflog) in the node's
// namespace and writes one Info line per denied packet.
//
// The flow capture's questions (resolve.go, agent/flowcap): ResolveAddr
// names the pod that holds an address, and whether it runs on this node,
// from the Pod cache (indexed by address) and the addresses Admit was
// told; FlowRules names the rules behind a rule id through
// Config.FlowIndex (policyrules.FlowIndex), which the service calls with
// each IR it is about to apply. Neither waits on an apply.
//
// Events (events.go, Config.Events, agent/kubeevents): a failed apply
// on the Node once per run of failures (PolicyApplyFailed), the recovery
// (PolicyApplied), and NetworkClosedAgentUnreachable on each pod
// Admission opens after its plugin closed it.
//
// Status (cnpstatus.go, cnpwriter.go): each ClusterNetworkPolicy's
// Accepted condition, computed from the cached policy (False with
// DomainNamesUnsupported, InvalidRule or Invalid; True otherwise) and
// patched on its status subresource only when the object's differs, with
// its resource version as the precondition: every agent computes the
// same condition, and one writes it.
//
// Besides the Events and that status, the service writes nothing to
// the API. It never switches a thread's
// namespace except through netns.Do when it opens its sockets, and it
// leaves the table in place when it stops, so that pods stay protected
// while the agent restarts.
package netpol
