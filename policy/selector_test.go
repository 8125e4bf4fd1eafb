package policy

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSelectorKeys(t *testing.T) {
	in := metav1.LabelSelectorOpIn
	tests := []struct {
		name    string
		sel     *metav1.LabelSelector
		key     string
		wantErr bool
	}{
		{"nil matches nothing", nil, keyNone, false},
		{"empty matches everything", &metav1.LabelSelector{}, keyAll, false},
		{"matchLabels", sel("b", "2", "a", "1"), "a in (1),b in (2)", false},
		{"matchLabels and In of one value are one requirement", &metav1.LabelSelector{
			MatchLabels:      map[string]string{"a": "1"},
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: in, Values: []string{"1"}}},
		}, "a in (1)", false},
		{"values sorted and deduplicated", expr("a", in, "z", "b", "z"), "a in (b z)", false},
		{"all operators", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "d", Operator: metav1.LabelSelectorOpDoesNotExist},
			{Key: "c", Operator: metav1.LabelSelectorOpExists},
			{Key: "b", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"x"}},
		}}, "b notin (x),c,!d", false},
		{"In without values", expr("a", in), keyNone, true},
		{"Exists with values", expr("a", metav1.LabelSelectorOpExists, "x"), keyNone, true},
		{"unknown operator", expr("a", "Like", "x"), keyNone, true},
		{"invalid key", sel("a b", "1"), keyNone, true},
		{"invalid value", sel("a", "not valid"), keyNone, true},
	}
	for _, tt := range tests {
		s, err := compileSelector(tt.sel)
		if s.key != tt.key || (err != nil) != tt.wantErr {
			t.Errorf("%s: key %q error %v, want %q error %v", tt.name, s.key, err, tt.key, tt.wantErr)
		}
	}
}
