package policy

import (
	"fmt"
	"strings"
)

// Decision is the answer for one connection from Src to Dst: allowed when
// the source's egress and the destination's ingress both allow it.
type Decision struct {
	Allowed bool
	Egress  Verdict // the source's side
	Ingress Verdict // the destination's side
}

// Verdict is one side's answer and its reason.
type Verdict struct {
	Reason Reason
	// IsolatedBy names the policies that isolate the pod in this
	// direction (namespace/name, sorted); empty when NotIsolated.
	IsolatedBy []string
	// AllowedBy lists every rule that allows the connection, sorted, when
	// Reason is AllowedByRule.
	AllowedBy []RuleRef
	// Admin is the first Admin tier ClusterNetworkPolicy rule that
	// matched (its action decided, or passed to NetworkPolicy); nil when
	// none did or the tier was not read (Self, LocalNode, NotIsolated
	// without any policy).
	Admin *ClusterRuleRef
	// Baseline is the first Baseline tier rule that matched, when the
	// tier was read: no Admin rule decided and no NetworkPolicy
	// isolates the pod.
	Baseline *ClusterRuleRef
}

// Allowed reports whether this side lets the connection through.
func (v Verdict) Allowed() bool {
	return v.Reason != Denied && v.Reason != DeniedByAdmin && v.Reason != DeniedByBaseline
}

// Reason says why a side allows or denies.
type Reason uint8

const (
	// NotIsolated: the end is no pod, or no policy selects the pod for
	// this direction, so this side allows everything.
	NotIsolated Reason = iota
	// Self: a pod cannot block its own traffic to itself.
	Self
	// LocalNode: traffic from a pod's own node is always allowed in.
	LocalNode
	// AllowedByRule: at least one rule of a policy selecting the pod
	// allows the connection (policies are additive).
	AllowedByRule
	// Denied: the pod is isolated and no rule allows the connection.
	Denied
	// AcceptedByAdmin: an Admin tier ClusterNetworkPolicy rule accepts
	// the connection (Verdict.Admin), whatever NetworkPolicy says.
	AcceptedByAdmin
	// DeniedByAdmin: an Admin tier rule denies it (Verdict.Admin).
	DeniedByAdmin
	// AcceptedByBaseline: no NetworkPolicy isolates the pod and a
	// Baseline tier rule accepts the connection (Verdict.Baseline).
	AcceptedByBaseline
	// DeniedByBaseline: no NetworkPolicy isolates the pod and a Baseline
	// tier rule denies the connection (Verdict.Baseline).
	DeniedByBaseline
)

func (r Reason) String() string {
	switch r {
	case NotIsolated:
		return "not isolated"
	case Self:
		return "to itself"
	case LocalNode:
		return "from its node"
	case AllowedByRule:
		return "allowed by rule"
	case Denied:
		return "denied"
	case AcceptedByAdmin:
		return "accepted by an Admin tier rule"
	case DeniedByAdmin:
		return "denied by an Admin tier rule"
	case AcceptedByBaseline:
		return "accepted by a Baseline tier rule"
	case DeniedByBaseline:
		return "denied by a Baseline tier rule"
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// RuleRef names one rule: index Index of spec.ingress or spec.egress of
// policy Policy (namespace/name).
type RuleRef struct {
	Policy string
	Index  int
}

// ClusterRuleRef names one ClusterNetworkPolicy rule: index Index of
// spec.ingress or spec.egress of policy Policy (its name), with what a
// person reading a decision wants next to it.
type ClusterRuleRef struct {
	Policy   string
	Tier     Tier
	Priority int32
	Index    int
	Name     string // the rule's name, may be empty
	// Action is what the rule did: its action, or Deny for a broken
	// Deny or Pass rule (it fails closed).
	Action Action
}

func (r ClusterRuleRef) String() string {
	s := fmt.Sprintf("%s %s (priority %d) rule %d", r.Tier, r.Policy, r.Priority, r.Index)
	if r.Name != "" {
		s += fmt.Sprintf(" %q", r.Name)
	}
	return s + " " + r.Action.String()
}

func compareRuleRefs(a, b RuleRef) int {
	if c := strings.Compare(a.Policy, b.Policy); c != 0 {
		return c
	}
	return a.Index - b.Index
}

func (d Decision) String() string {
	verdict := "denied"
	if d.Allowed {
		verdict = "allowed"
	}
	return fmt.Sprintf("%s (egress: %s; ingress: %s)", verdict, d.Egress, d.Ingress)
}

func (v Verdict) String() string {
	switch v.Reason {
	case AllowedByRule:
		refs := make([]string, len(v.AllowedBy))
		for i, r := range v.AllowedBy {
			refs[i] = fmt.Sprintf("%s rule %d", r.Policy, r.Index)
		}
		return "allowed by " + strings.Join(refs, ", ")
	case Denied:
		s := "isolated by " + strings.Join(v.IsolatedBy, ", ") + " and no rule allows"
		if v.Admin != nil {
			s = v.Admin.String() + ", then " + s
		}
		return s
	case AcceptedByAdmin, DeniedByAdmin:
		return v.Admin.String()
	case AcceptedByBaseline, DeniedByBaseline:
		return v.Baseline.String()
	case NotIsolated:
		if v.Baseline != nil {
			return v.Baseline.String() + ": " + v.Reason.String()
		}
	}
	return v.Reason.String()
}

func decision(eg, in Verdict) Decision {
	return Decision{Allowed: eg.Allowed() && in.Allowed(), Egress: eg, Ingress: in}
}
