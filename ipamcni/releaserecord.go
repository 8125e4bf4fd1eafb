package ipamcni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
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

// recordName is a handle as a file name: <network>.<containerID> is
// made of CNI's identifier characters, which are safe in a path.
var recordName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.\-]*$`)

func recordPath(dir, handle string) (string, error) {
	if !recordName.MatchString(handle) || len(handle) > 250 {
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

// ErrReleasing means the agent is releasing the handle's addresses now:
// an ADD of the handle must wait for it (code 11, the runtime retries).
var ErrReleasing = errors.New("the node agent is releasing this handle's addresses")

// claimedPath is where the agent moves a record while it releases it.
func claimedPath(path string) string {
	return filepath.Join(filepath.Dir(path), ".claimed-"+filepath.Base(path))
}

// ClearReleaseRecord is what an ADD of handle does first: a record of the
// handle is dropped (the ADD takes the handle's addresses over); if the
// agent has claimed it, the ADD gets ErrReleasing. Ordering makes it
// race-free against the agent's claim: the remove comes first, and a
// record that vanished under it was renamed by the agent, whose claim
// file is then still there until the release is done.
func ClearReleaseRecord(dir, handle string) error {
	return clearReleaseRecord(dir, handle, func() {})
}

// clearReleaseRecord is ClearReleaseRecord calling between() between its
// steps, for tests that interleave an agent with them.
func clearReleaseRecord(dir, handle string, between func()) error {
	path, err := recordPath(dir, handle)
	if err != nil {
		return err
	}
	err = os.Remove(path)
	if err == nil {
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	between()
	if _, err := os.Lstat(claimedPath(path)); err == nil {
		return ErrReleasing
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// FinishRelease is the node agent's side: it claims the record of handle
// in dir (done is false, with no error, when an ADD dropped it first),
// calls release with it, and drops the record once release succeeds; a
// failed release puts the record back for the next pass. No ADD can
// replace a claimed record meanwhile (ADDs of a claimed handle wait).
func FinishRelease(ctx context.Context, dir, handle string, release func(ReleaseRecord) error) (done bool, err error) {
	path, err := recordPath(dir, handle)
	if err != nil {
		return false, err
	}
	claimed := claimedPath(path)
	err = os.Rename(path, claimed)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	rec, err := readRecord(claimed, handle)
	if err == nil {
		err = release(rec)
	}
	if err != nil {
		return false, errors.Join(err, os.Rename(claimed, path))
	}
	if err := os.Remove(claimed); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return true, err
	}
	return true, nil
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

// ReadReleaseRecords returns every record in dir (none when dir does not
// exist). A file that does not decode is reported in the error and
// skipped, so one bad file does not hold up the others.
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
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, ".json") || strings.HasPrefix(name, ".") {
			continue
		}
		rec, err := readRecord(filepath.Join(dir, name), strings.TrimSuffix(name, ".json"))
		if errors.Is(err, fs.ErrNotExist) {
			continue // dropped by an ADD since the listing
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, rec)
	}
	return out, errors.Join(errs...)
}

// UnclaimAll puts back every claimed record in dir.
func UnclaimAll(dir string) error {
	claimed, err := filepath.Glob(filepath.Join(dir, ".claimed-*.json"))
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range claimed {
		orig := filepath.Join(dir, strings.TrimPrefix(filepath.Base(c), ".claimed-"))
		errs = append(errs, os.Rename(c, orig))
	}
	return errors.Join(errs...)
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
