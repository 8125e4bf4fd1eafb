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
}

// Allowed reports whether this side lets the connection through.
func (v Verdict) Allowed() bool { return v.Reason != Denied }

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
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// RuleRef names one rule: index Index of spec.ingress or spec.egress of
// policy Policy (namespace/name).
type RuleRef struct {
	Policy string
	Index  int
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
		return "isolated by " + strings.Join(v.IsolatedBy, ", ") + " and no rule allows"
	}
	return v.Reason.String()
}

func decision(eg, in Verdict) Decision {
	return Decision{Allowed: eg.Allowed() && in.Allowed(), Egress: eg, Ingress: in}
}
