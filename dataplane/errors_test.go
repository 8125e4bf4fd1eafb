package dataplane

import (
	"errors"
	"fmt"
	"testing"
)

func TestErrorIs(t *testing.T) {
	err := fmt.Errorf("create: %w", errorf(KindConflict, "link %s exists", "pn0"))
	if !errors.Is(err, &Error{Kind: KindConflict}) || errors.Is(err, &Error{Kind: KindNotBridge}) {
		t.Fatalf("%v: kind not matched", err)
	}
	// A target with a message is one error, not a kind.
	if errors.Is(err, &Error{Kind: KindConflict, Msg: "other"}) {
		t.Fatal("matched a target with a message")
	}
	var de *Error
	if !errors.As(err, &de) || de.Msg != "link pn0 exists" || de.Kind.String() != "conflict" {
		t.Fatalf("%+v", de)
	}
}
