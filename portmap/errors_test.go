package portmap

import (
	"errors"
	"fmt"
	"testing"
)

func TestErrorIs(t *testing.T) {
	err := fmt.Errorf("add: %w", errorf(KindIO, "no socket"))
	if !errors.Is(err, &Error{Kind: KindIO}) || errors.Is(err, &Error{Kind: KindConflict}) {
		t.Fatalf("%v: kind not matched", err)
	}
	var pe *Error
	if !errors.As(err, &pe) || pe.Msg != "no socket" || pe.Kind.String() != "I/O failure" {
		t.Fatalf("%+v", pe)
	}
	if s := Kind(99).String(); s != "kind 99" {
		t.Fatalf("unknown kind: %s", s)
	}
}
