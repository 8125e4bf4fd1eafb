package netpol

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podnet/podnet/policy"
)

// The condition podnet writes on every ClusterNetworkPolicy's status.
// network-policy-api v0.3.0 defines status.conditions but no condition
// types or reasons; Accepted is Gateway API's word for "the
// implementation read the object and enforces it as written".
const (
	ConditionAccepted = "Accepted"
	// ReasonAccepted: every rule is enforced as written.
	ReasonAccepted = "Accepted"
	// ReasonDomainNamesUnsupported: a domainNames peer matches nothing,
	// since podnet does not resolve names; the rest is enforced.
	ReasonDomainNamesUnsupported = "DomainNamesUnsupported"
	// ReasonInvalidRule: a rule podnet cannot read fails closed (an
	// Accept rule matches nothing, any other denies everything).
	ReasonInvalidRule = "InvalidRule"
	// ReasonInvalid: the policy applies to no pod.
	ReasonInvalid = "Invalid"
)

// acceptedCondition is the Accepted condition podnet says of p, at the
// object's generation (without a time: sameCondition does not compare
// it). Every agent computes the same one from the same object.
func acceptedCondition(p *policy.ClusterPolicy, generation int64) metav1.Condition {
	c := metav1.Condition{Type: ConditionAccepted, Status: metav1.ConditionTrue, Reason: ReasonAccepted,
		Message: "podnet enforces every rule of the policy", ObservedGeneration: generation}
	if p.Invalid != "" {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, ReasonInvalid, "podnet applies the policy to no pod: "+p.Invalid
		return c
	}
	var broken, domains []string
	for _, dir := range []struct {
		field string
		rules []policy.ClusterRule
	}{{"ingress", p.Ingress}, {"egress", p.Egress}} {
		for i, r := range dir.rules {
			at := ruleName(dir.field, i, r.Name)
			if r.Broken != "" {
				broken = append(broken, at+": "+r.Broken)
			}
			for _, peer := range r.Peers {
				if len(peer.DomainNames) > 0 {
					domains = append(domains, fmt.Sprintf("%s: domainNames %s", at, strings.Join(peer.DomainNames, ", ")))
				}
			}
		}
	}
	switch {
	case len(broken) > 0:
		c.Status, c.Reason = metav1.ConditionFalse, ReasonInvalidRule
		c.Message = "rules podnet cannot read fail closed (an Accept rule matches nothing, any other denies everything): " + strings.Join(broken, "; ")
	case len(domains) > 0:
		c.Status, c.Reason = metav1.ConditionFalse, ReasonDomainNamesUnsupported
		c.Message = "podnet does not resolve domain names: these peers match nothing (the rest of the policy is enforced): " + strings.Join(domains, "; ")
	}
	if len(c.Message) > maxConditionMessage {
		c.Message = c.Message[:maxConditionMessage-3] + "..."
	}
	return c
}

// maxConditionMessage is metav1.Condition's limit on Message.
const maxConditionMessage = 32768

func ruleName(field string, i int, name string) string {
	if name == "" {
		return fmt.Sprintf("spec.%s[%d]", field, i)
	}
	return fmt.Sprintf("spec.%s[%d] (%s)", field, i, name)
}

// sameCondition reports whether have says what want says: the times are
// left out, so that agents computing want at different times agree.
func sameCondition(have *metav1.Condition, want metav1.Condition) bool {
	return have != nil && have.Type == want.Type && have.Status == want.Status && have.Reason == want.Reason &&
		have.Message == want.Message && have.ObservedGeneration == want.ObservedGeneration
}

// withCondition returns conds with want in place of the condition of its
// type (others' conditions kept), its transition time kept when the
// status did not change, now otherwise.
func withCondition(conds []metav1.Condition, want metav1.Condition, now time.Time) []metav1.Condition {
	out := slices.Clone(conds)
	want.LastTransitionTime = metav1.NewTime(now.UTC().Truncate(time.Second))
	for i := range out {
		if out[i].Type != want.Type {
			continue
		}
		if out[i].Status == want.Status {
			want.LastTransitionTime = out[i].LastTransitionTime
		}
		out[i] = want
		return out
	}
	return append(out, want)
}
