package policy

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// selector is a label selector compiled for Compile: requirements in a
// canonical order, so that two selectors that select the same way by
// construction (matchLabels {a: x} and matchExpressions a In [x]; the
// same requirements in another order) have the same key and share one
// set. Decide does not use it: it matches with apimachinery's selectors,
// which makes it a check of this code.
type selector struct {
	reqs []requirement
	// none is set for a nil or invalid selector: it matches nothing.
	none bool
	key  string
}

type selectorOp uint8

const (
	opIn selectorOp = iota
	opNotIn
	opExists
	opDoesNotExist
)

type requirement struct {
	key    string
	op     selectorOp
	values []string // sorted, without duplicates
}

// keyNone is the key of a selector that matches nothing; keyAll, of one
// that matches everything. No compiled requirement prints as either.
const (
	keyNone = "!"
	keyAll  = ""
)

// compileSelector compiles ls. Per the label selector semantics, an empty
// selector matches everything; podnet takes nil to match nothing, and the
// callers map an absent selector to what the API says it means. A selector
// the API server would refuse matches nothing and comes back with an error.
func compileSelector(ls *metav1.LabelSelector) (selector, error) {
	if ls == nil {
		return selector{none: true, key: keyNone}, nil
	}
	reqs := make([]requirement, 0, len(ls.MatchLabels)+len(ls.MatchExpressions))
	for k, v := range ls.MatchLabels {
		if err := checkLabel(k, []string{v}); err != nil {
			return selector{none: true, key: keyNone}, err
		}
		reqs = append(reqs, requirement{key: k, op: opIn, values: []string{v}})
	}
	for _, e := range ls.MatchExpressions {
		var r requirement
		r.key = e.Key
		switch e.Operator {
		case metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn:
			if len(e.Values) == 0 {
				return selector{none: true, key: keyNone}, fmt.Errorf("%s %s needs values", e.Key, e.Operator)
			}
			r.op = opIn
			if e.Operator == metav1.LabelSelectorOpNotIn {
				r.op = opNotIn
			}
			r.values = slices.Compact(slices.Sorted(slices.Values(e.Values)))
		case metav1.LabelSelectorOpExists, metav1.LabelSelectorOpDoesNotExist:
			if len(e.Values) != 0 {
				return selector{none: true, key: keyNone}, fmt.Errorf("%s %s takes no values", e.Key, e.Operator)
			}
			r.op = opExists
			if e.Operator == metav1.LabelSelectorOpDoesNotExist {
				r.op = opDoesNotExist
			}
		default:
			return selector{none: true, key: keyNone}, fmt.Errorf("%s: unknown operator %q", e.Key, e.Operator)
		}
		if err := checkLabel(r.key, r.values); err != nil {
			return selector{none: true, key: keyNone}, err
		}
		reqs = append(reqs, r)
	}
	slices.SortFunc(reqs, compareRequirements)
	reqs = slices.CompactFunc(reqs, func(a, b requirement) bool { return compareRequirements(a, b) == 0 })
	var b strings.Builder
	for i, r := range reqs {
		if i > 0 {
			b.WriteByte(',')
		}
		switch r.op {
		case opIn:
			fmt.Fprintf(&b, "%s in (%s)", r.key, strings.Join(r.values, " "))
		case opNotIn:
			fmt.Fprintf(&b, "%s notin (%s)", r.key, strings.Join(r.values, " "))
		case opExists:
			b.WriteString(r.key)
		case opDoesNotExist:
			b.WriteString("!" + r.key)
		}
	}
	return selector{reqs: reqs, key: b.String()}, nil
}

func checkLabel(key string, values []string) error {
	if errs := validation.IsQualifiedName(key); len(errs) > 0 {
		return fmt.Errorf("label key %q: %s", key, strings.Join(errs, "; "))
	}
	for _, v := range values {
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return fmt.Errorf("label value %q: %s", v, strings.Join(errs, "; "))
		}
	}
	return nil
}

func compareRequirements(a, b requirement) int {
	if c := strings.Compare(a.key, b.key); c != 0 {
		return c
	}
	if a.op != b.op {
		return int(a.op) - int(b.op)
	}
	return slices.Compare(a.values, b.values)
}

func (s *selector) matches(labels map[string]string) bool {
	if s.none {
		return false
	}
	for i := range s.reqs {
		r := &s.reqs[i]
		v, ok := labels[r.key]
		switch r.op {
		case opIn:
			if !ok || !slices.Contains(r.values, v) {
				return false
			}
		case opNotIn:
			if ok && slices.Contains(r.values, v) {
				return false
			}
		case opExists:
			if !ok {
				return false
			}
		case opDoesNotExist:
			if ok {
				return false
			}
		}
	}
	return true
}
