package ipamcni

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/podnet/podnet/internal/flock"
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

// TestReleaseRecordHolderKilled: a holder of the release dir's lock that
// dies (the agent mid-release, a plugin mid-ADD) leaves the record as it
// was, and nobody waiting: the kernel drops a dead process's flock, which
// closing the lock's descriptor stands for here.
func TestReleaseRecordHolderKilled(t *testing.T) {
	dir := t.TempDir()
	rec := ReleaseRecord{Node: "self", Handle: "n.c1"}
	if err := WriteReleaseRecord(dir, rec); err != nil {
		t.Fatal(err)
	}
	held, err := flock.TryAcquire(filepath.Join(dir, lockName))
	if err != nil {
		t.Fatal(err)
	}
	if err := ClearReleaseRecord(dir, "n.c1"); !errors.Is(err, ErrReleasing) {
		t.Fatalf("ADD while the agent holds the lock: %v, want ErrReleasing", err)
	}
	held.Release() // the agent is killed
	if recs, err := ReadReleaseRecords(dir); err != nil || len(recs) != 1 {
		t.Fatalf("records after the agent died: %+v, %v; want the one it held", recs, err)
	}
	if err := ClearReleaseRecord(dir, "n.c1"); err != nil {
		t.Fatalf("ADD after the agent died: %v", err)
	}
	if recs, err := ReadReleaseRecords(dir); err != nil || len(recs) != 0 {
		t.Fatalf("records after the ADD: %+v, %v", recs, err)
	}
}

// TestReleaseRecordLegacyClaim: the claim an agent of an earlier version
// left when it was killed (the record renamed to .claimed-<handle>.json)
// is a record like any other: listed, released and dropped by the agent,
// or dropped by an ADD.
func TestReleaseRecordLegacyClaim(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	claim := func(handle string) {
		t.Helper()
		if err := WriteReleaseRecord(dir, ReleaseRecord{Node: "self", Handle: handle}); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, handle+".json"), filepath.Join(dir, ".claimed-"+handle+".json")); err != nil {
			t.Fatal(err)
		}
	}
	claim("n.c1")
	claim("n.c2")
	if recs, err := ReadReleaseRecords(dir); err != nil || len(recs) != 2 || recs[0].Handle != "n.c1" || recs[1].Handle != "n.c2" {
		t.Fatalf("records: %+v, %v; want n.c1 and n.c2", recs, err)
	}
	released := 0
	if done, err := FinishRelease(ctx, dir, "n.c1", func(ReleaseRecord) error { released++; return nil }); !done || err != nil || released != 1 {
		t.Fatalf("FinishRelease of a legacy claim: %v, %v, %d releases", done, err, released)
	}
	if err := ClearReleaseRecord(dir, "n.c2"); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != lockName {
			t.Errorf("left in the release dir: %s", e.Name())
		}
	}
}
