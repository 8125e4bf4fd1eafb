package kinderr

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

type kind uint8

type otherKind uint8

func TestErrorMatching(t *testing.T) {
	err := fmt.Errorf("outer: %w", Errorf(kind(2), "open %s: %w", "x", fs.ErrNotExist))
	if !errors.Is(err, &Error[kind]{Kind: 2}) {
		t.Error("kind not matched")
	}
	if errors.Is(err, &Error[kind]{Kind: 3}) || errors.Is(err, &Error[otherKind]{Kind: 2}) {
		t.Error("matched another kind, or another domain's")
	}
	if errors.Is(err, &Error[kind]{Kind: 2, Msg: "open x: file does not exist"}) {
		t.Error("an error that happened is not a kind to match")
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Error("cause lost")
	}
	var e *Error[kind]
	if !errors.As(err, &e) || e.Msg != "open x: file does not exist" {
		t.Errorf("As: %v", e)
	}
	if e := Errorf(kind(1), "plain %d", 7); e.Err != nil || e.Error() != "plain 7" {
		t.Errorf("without %%w: %+v", e)
	}
}
