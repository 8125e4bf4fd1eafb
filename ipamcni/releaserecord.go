package ipamcni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/podnet/podnet/internal/flock"
)

// DefaultReleaseDir is where a DEL leaves the releases it could not make
// for the node's agent to finish (Config.ReleaseDir).
const DefaultReleaseDir = "/var/lib/podnet/releases"

// ReleaseRecord is a release a DEL could not make because the store was
// unreachable: the DEL succeeds (a pod's teardown must not hang on the
// IPAM's datastore) and the node's agent releases the handle once the
// store answers again (FinishRelease). Until then the addresses stay
// allocated: leaked for a while, never given out twice. It is kept in
// <release dir>/<handle>.json.
//
// A release is by node and handle (<network>.<container ID>), which also
// names the endpoint: the record holds what the agent needs for it and
// no more.
type ReleaseRecord struct {
	Node   string `json:"node"`
	Handle string `json:"handle"`
	// Prefix is the store key prefix the addresses were allocated under.
	Prefix string    `json:"prefix,omitempty"`
	Time   time.Time `json:"time"`
}

// recordName reports whether a handle can be a file name:
// <network>.<containerID> is made of CNI's identifier characters
// ([A-Za-z0-9][A-Za-z0-9_.-]*), which are safe in a path. By hand, not
// a regexp: compiling one costs every plugin exec.
func recordName(h string) bool {
	for i := 0; i < len(h); i++ {
		c := h[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '.' && c != '-') {
			return false
		}
	}
	return h != ""
}

func recordPath(dir, handle string) (string, error) {
	if !recordName(handle) || len(handle) > 250 {
		return "", fmt.Errorf("handle %q cannot name a release record file", handle)
	}
	return filepath.Join(dir, handle+".json"), nil
}

// WriteReleaseRecord records rec in dir durably: written to a temporary
// file, synced, renamed over any earlier record of the handle, and the
// directory synced, so a crash leaves the old record or the new one.
func WriteReleaseRecord(dir string, rec ReleaseRecord) error {
	path, err := recordPath(dir, rec.Handle)
	if err != nil {
		return err
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("release dir: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("release dir: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing to remove
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("record release of %s in %s: %w", rec.Handle, dir, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Who owns a release record, and when:
//
//   - A DEL of the handle creates it (WriteReleaseRecord). The runtime
//     never runs a DEL and an ADD of one container at once.
//   - The node's agent finishes it (FinishRelease) holding the lock of the
//     release dir (flock(2) on <dir>/.lock) for the whole of one release:
//     it reads the record, releases the handle, and removes the record
//     only once the release succeeded; a failed release leaves it in
//     place for the next pass.
//   - An ADD that reuses the handle (ClearReleaseRecord) supersedes the
//     release: if the record is there, it takes the same lock, without
//     waiting, and removes the record. While the agent holds the lock the
//     ADD gets ErrReleasing: the release may still succeed, and the
//     handle's addresses must not be handed to the pod before it has.
//
// The record never moves, so an ADD's look cannot miss it: it appears
// only by a DEL, and goes only under the lock. (The rename by which an
// agent used to claim it, and put it back after a failed release, let an
// ADD look between the two and find it in neither place, then reuse
// addresses the next pass released: TestReleaseRecordRace.) The kernel
// lets go of the lock when its holder dies, so an agent or a plugin
// killed at any point leaves the record as it was, for the next pass or
// the next ADD, and nobody waiting for a dead process.

// lockName is the release dir's lock file.
const lockName = ".lock"

// legacyClaimedPrefix names the record of a handle that an agent of an
// earlier version claimed (renamed to .claimed-<handle>.json) and was
// killed before it put it back: it is read, released and dropped like
// the record itself.
const legacyClaimedPrefix = ".claimed-"

// finishLockTimeout bounds the agent's wait for the release dir's lock,
// which an ADD holds for one unlink.
const finishLockTimeout = 5 * time.Second

// ErrReleasing means the node agent is finishing a release DELs recorded
// (this handle's, or one before it): an ADD of a handle with a recorded
// release must wait for it (code 11, the runtime retries).
var ErrReleasing = errors.New("the node agent is releasing addresses DELs recorded, and this handle has a recorded release")

// recordPaths returns where the record of handle can be: its own path,
// and the path of an earlier agent's claim.
func recordPaths(dir, handle string) ([]string, error) {
	path, err := recordPath(dir, handle)
	if err != nil {
		return nil, err
	}
	return []string{path, filepath.Join(dir, legacyClaimedPrefix+filepath.Base(path))}, nil
}

// ClearReleaseRecord is what an ADD of handle does first: a record of the
// handle is dropped (the ADD takes the handle's addresses over), unless
// the agent is releasing, when the ADD gets ErrReleasing.
func ClearReleaseRecord(dir, handle string) error {
	return clearReleaseRecord(dir, handle, func() {})
}

// clearReleaseRecord is ClearReleaseRecord calling between() between its
// steps, for tests that interleave the agent with them.
func clearReleaseRecord(dir, handle string, between func()) error {
	paths, err := recordPaths(dir, handle)
	if err != nil {
		return err
	}
	found := false
	for _, p := range paths {
		_, err := os.Lstat(p)
		if err == nil {
			found = true
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if !found {
		return nil // the common case: no lock taken
	}
	between()
	l, err := flock.TryAcquire(filepath.Join(dir, lockName))
	if errors.Is(err, flock.ErrBusy) {
		return ErrReleasing
	}
	if err != nil {
		return err
	}
	defer l.Release()
	between()
	return removeRecord(paths)
}

// FinishRelease is the node agent's side: under the release dir's lock it
// reads the record of handle, calls release with it, and drops the record
// once release succeeds. done is false, with no error, when there is no
// record (an ADD dropped it); a failed release leaves the record for the
// next pass.
func FinishRelease(ctx context.Context, dir, handle string, release func(ReleaseRecord) error) (done bool, err error) {
	paths, err := recordPaths(dir, handle)
	if err != nil {
		return false, err
	}
	l, err := flock.Acquire(ctx, filepath.Join(dir, lockName), finishLockTimeout)
	if err != nil {
		return false, err
	}
	defer l.Release()
	for _, p := range paths {
		rec, err := readRecord(p, handle)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return false, err
		}
		if err := release(rec); err != nil {
			return false, err
		}
		// A DEL may have rewritten the record meanwhile; it asked for the
		// release just made: no ADD of the handle went ahead since the
		// lock was taken.
		return true, removeRecord(paths)
	}
	return false, nil
}

// removeRecord removes the record at each of paths that has one.
func removeRecord(paths []string) error {
	var errs []error
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// readRecord reads the record of handle at path.
func readRecord(path, handle string) (ReleaseRecord, error) {
	var rec ReleaseRecord
	data, err := os.ReadFile(path)
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(data, &rec); err != nil || rec.Handle != handle {
		return rec, fmt.Errorf("release record file %s: not a release record of %s", path, handle)
	}
	return rec, nil
}

// ReadReleaseRecords returns every record in dir, one per handle (none
// when dir does not exist). A file that does not decode is reported in
// the error and skipped, so one bad file does not hold up the others.
func ReadReleaseRecords(dir string) ([]ReleaseRecord, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []ReleaseRecord
	var errs []error
	seen := map[string]bool{}
	for _, e := range ents {
		handle, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		if h, legacy := strings.CutPrefix(handle, legacyClaimedPrefix); legacy {
			handle = h
		} else if strings.HasPrefix(handle, ".") {
			continue
		}
		if seen[handle] {
			continue
		}
		rec, err := readRecord(filepath.Join(dir, e.Name()), handle)
		if errors.Is(err, fs.ErrNotExist) {
			continue // dropped since the listing
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		seen[handle] = true
		out = append(out, rec)
	}
	return out, errors.Join(errs...)
}

// releaseRecordFor is the record of a release at for req that failed now.
func releaseRecordFor(req *Request, at PodInterface, now time.Time) ReleaseRecord {
	return ReleaseRecord{Node: req.Config.Node, Handle: Handle(req.Network, at.ContainerID), Prefix: req.Config.Prefix, Time: now.UTC()}
}

// remoteStore reports whether req's store is one a node agent serves
// (etcd, the Kubernetes API, the agent's own socket "agent:"): only
// there is anybody left to finish a release later. A bbolt file on a
// machine without an agent is retried by the runtime instead.
func remoteStore(req *Request) bool {
	return !strings.HasPrefix(req.Config.Store, "bolt:")
}

// releaseDir is where req's release records go.
func releaseDir(req *Request) string {
	if req.Config.ReleaseDir != "" {
		return req.Config.ReleaseDir
	}
	return DefaultReleaseDir
}
