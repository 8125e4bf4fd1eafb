package ipamcni

import (
	"context"
	"errors"
	"testing"
)

// TestReleaseRecordOrdering: an ADD of a handle the agent is releasing
// waits (ErrReleasing) until the release is done; one that comes first
// drops the record, and the agent then finds nothing to release; a
// release that fails leaves the record for the next pass.
func TestReleaseRecordOrdering(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	rec := ReleaseRecord{Node: "self", Handle: "n.c1"}
	if err := WriteReleaseRecord(dir, rec); err != nil {
		t.Fatal(err)
	}
	released := 0
	done, err := FinishRelease(ctx, dir, "n.c1", func(got ReleaseRecord) error {
		released++
		if got.Handle != "n.c1" || got.Node != "self" {
			t.Errorf("released %+v, want %+v", got, rec)
		}
		if err := ClearReleaseRecord(dir, "n.c1"); !errors.Is(err, ErrReleasing) {
			t.Errorf("ADD during the release: %v, want ErrReleasing", err)
		}
		return nil
	})
	if !done || err != nil || released != 1 {
		t.Fatalf("FinishRelease: done %v, %v, released %d times; want done once", done, err, released)
	}
	if err := ClearReleaseRecord(dir, "n.c1"); err != nil {
		t.Fatalf("ADD after the release: %v", err)
	}
	if recs, err := ReadReleaseRecords(dir); err != nil || len(recs) != 0 {
		t.Fatalf("records after the release: %+v, %v", recs, err)
	}

	// An ADD first: the agent has nothing to do.
	if err := WriteReleaseRecord(dir, rec); err != nil {
		t.Fatal(err)
	}
	if err := ClearReleaseRecord(dir, "n.c1"); err != nil {
		t.Fatal(err)
	}
	if done, err := FinishRelease(ctx, dir, "n.c1", func(ReleaseRecord) error {
		t.Error("released a handle an ADD took over")
		return nil
	}); done || err != nil {
		t.Fatalf("FinishRelease after the ADD dropped the record: %v, %v", done, err)
	}

	// A failed release keeps the record for the next pass.
	if err := WriteReleaseRecord(dir, rec); err != nil {
		t.Fatal(err)
	}
	unreachable := errors.New("store unreachable")
	if done, err := FinishRelease(ctx, dir, "n.c1", func(ReleaseRecord) error { return unreachable }); done || !errors.Is(err, unreachable) {
		t.Fatalf("failed release: %v, %v", done, err)
	}
	if recs, err := ReadReleaseRecords(dir); err != nil || len(recs) != 1 || recs[0].Handle != "n.c1" {
		t.Fatalf("records after a failed release: %+v, %v", recs, err)
	}
	if err := WriteReleaseRecord(dir, ReleaseRecord{Handle: "../x"}); err == nil {
		t.Fatal("a handle with a path separator named a file")
	}
}
