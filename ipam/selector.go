package ipam

import (
	"fmt"
	"strings"
)

// Selector is a parsed pool node selector: a comma-separated list of
// requirements that must all hold, each one of
//
//	key==value  key=value  key!=value  key  !key
//
// Empty and "all()" select every node. This is the subset of Kubernetes
// label selectors pools need; set-based terms may come later.
type Selector []requirement

type requirement struct {
	key, value string
	op         string // "=", "!=", "exists", "!exists"
}

// ParseSelector parses s.
func ParseSelector(s string) (Selector, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "all()" {
		return nil, nil
	}
	var sel Selector
	for term := range strings.SplitSeq(s, ",") {
		term = strings.TrimSpace(term)
		var r requirement
		switch {
		case strings.Contains(term, "!="):
			k, v, _ := strings.Cut(term, "!=")
			r = requirement{strings.TrimSpace(k), strings.TrimSpace(v), "!="}
		case strings.Contains(term, "=="):
			k, v, _ := strings.Cut(term, "==")
			r = requirement{strings.TrimSpace(k), strings.TrimSpace(v), "="}
		case strings.Contains(term, "="):
			k, v, _ := strings.Cut(term, "=")
			r = requirement{strings.TrimSpace(k), strings.TrimSpace(v), "="}
		case strings.HasPrefix(term, "!"):
			r = requirement{key: strings.TrimSpace(term[1:]), op: "!exists"}
		default:
			r = requirement{key: term, op: "exists"}
		}
		if r.key == "" || strings.ContainsAny(r.key, " !=") || strings.ContainsAny(r.value, " !=,") {
			return nil, fmt.Errorf("term %q: want key=value, key!=value, key or !key", term)
		}
		sel = append(sel, r)
	}
	return sel, nil
}

// Matches reports whether labels satisfy every requirement.
func (s Selector) Matches(labels map[string]string) bool {
	for _, r := range s {
		v, ok := labels[r.key]
		switch r.op {
		case "=":
			if !ok || v != r.value {
				return false
			}
		case "!=":
			if ok && v == r.value {
				return false
			}
		case "exists":
			if !ok {
				return false
			}
		case "!exists":
			if ok {
				return false
			}
		}
	}
	return true
}
