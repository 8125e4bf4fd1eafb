package flows

import (
	"net/netip"
	"time"
)

// Verdict is what the node's data path did with a flow's first packet.
type Verdict string

// The verdicts. A flow is forwarded when conntrack confirmed it (its
// first packet passed every hook), dropped by policy when a NetworkPolicy
// or ClusterNetworkPolicy chain dropped it, dropped by the guard when
// the pod's source guard dropped it (a forged source or MAC).
const (
	Forwarded     Verdict = "forwarded"
	DroppedPolicy Verdict = "dropped-policy"
	DroppedGuard  Verdict = "dropped-guard"
)

// Event says which moment of a flow a record is: its start (conntrack's
// new, or the first dropped packet), or its end (conntrack's destroy,
// with the counts).
type Event string

// The events.
const (
	Start Event = "start"
	End   Event = "end"
)

// Endpoint is one side of a flow: the address and port, and the pod that
// holds the address when the agent knows one (empty for an address
// outside the pod network, or a node's).
type Endpoint struct {
	IP        netip.Addr `json:"ip"`
	Port      uint16     `json:"port,omitempty"`
	Namespace string     `json:"namespace,omitempty"`
	Pod       string     `json:"pod,omitempty"`
}

// PodKey is "namespace/name", or "" for an endpoint without a pod.
func (e Endpoint) PodKey() string {
	if e.Pod == "" {
		return ""
	}
	return e.Namespace + "/" + e.Pod
}

// Rule names a policy rule that decided a flow: the NetworkPolicy rule
// that allowed it, a NetworkPolicy that isolated the pod without allowing
// it (Rule -1), or a ClusterNetworkPolicy rule of a tier.
type Rule struct {
	// Kind is "NetworkPolicy" or "ClusterNetworkPolicy".
	Kind string `json:"kind"`
	// Tier is "Admin" or "Baseline" for a ClusterNetworkPolicy, else "".
	Tier string `json:"tier,omitempty"`
	// Namespace is the NetworkPolicy's namespace ("" for a cluster one).
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// Direction is "ingress" or "egress": the side of the flow whose
	// chain the rule is in (ingress: the destination pod's).
	Direction string `json:"direction"`
	// Index is the rule's index in the policy's ingress or egress list,
	// -1 for a NetworkPolicy that isolated the pod and allowed nothing.
	Index int `json:"index"`
	// Action is "Allow", "Deny" or "Pass" ("Accept" of a
	// ClusterNetworkPolicy is "Allow").
	Action string `json:"action"`
}

// Record is one flow record. A forwarded connection gives two, at its
// start and at its end (with the counts of both directions); a dropped
// one gives one Start per burst of dropped packets (Packets counting
// them).
type Record struct {
	Time     time.Time `json:"time"`
	Node     string    `json:"node"`
	Event    Event     `json:"event"`
	Protocol string    `json:"protocol"` // TCP, UDP, SCTP, ICMP, ICMPv6, or the number
	Src      Endpoint  `json:"src"`
	Dst      Endpoint  `json:"dst"`
	Verdict  Verdict   `json:"verdict"`
	// Rules decided the verdict: the egress side's first, then the
	// ingress side's. Empty for a flow no policy selects.
	Rules   []Rule `json:"rules,omitempty"`
	Packets uint64 `json:"packets,omitempty"`
	Bytes   uint64 `json:"bytes,omitempty"`
	// Seq is the agent's sequence number of the record (per agent,
	// increasing; a gap a client sees is records the ring overwrote or
	// its subscription dropped).
	Seq uint64 `json:"seq"`
}
