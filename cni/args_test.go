package cni

import (
	"reflect"
	"testing"
)

func TestParseArgs(t *testing.T) {
	tests := []struct {
		in      string
		want    [][2]string
		wantErr bool
	}{
		{"", nil, false},
		{"IgnoreUnknown=1", [][2]string{{"IgnoreUnknown", "1"}}, false},
		{"A=1;B=x=y;", [][2]string{{"A", "1"}, {"B", "x=y"}}, false},
		{"A=", [][2]string{{"A", ""}}, false},
		{"A", nil, true},
		{"=1", nil, true},
		{"A=1;;B=2", [][2]string{{"A", "1"}, {"B", "2"}}, false},
	}
	for _, tc := range tests {
		got, err := ParseArgs(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("ParseArgs(%q) error = %v", tc.in, err)
			continue
		}
		if err != nil {
			if CodeOf(err) != CodeInvalidEnvironment {
				t.Errorf("ParseArgs(%q) code %d, want 4", tc.in, CodeOf(err))
			}
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseArgs(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestFormatArgsRoundTrip(t *testing.T) {
	in := [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAME", "web-0"}, {"IP", "10.0.0.5"}}
	s, err := FormatArgs(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := ParseArgs(s)
	if err != nil || !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip: %q -> %v, %v", s, out, err)
	}
	if _, err := FormatArgs([][2]string{{"A;B", "1"}}); err == nil {
		t.Error("key with ';' accepted")
	}
}
