package cni

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// DefaultCacheDir is where results are cached unless configured otherwise;
// it is libcni's default, so runtimes on one node share attachments.
const DefaultCacheDir = "/var/lib/cni"

// cacheKind marks libcni's cache layout version, which podnet reads and
// writes unchanged.
const cacheKind = "cniCacheV1"

// cacheEntry is one cached attachment in libcni's cniCacheV1 layout.
// Config is the network configuration used at ADD, base64 in JSON as
// libcni writes a []byte.
type cacheEntry struct {
	Kind           string          `json:"kind"`
	ContainerID    string          `json:"containerId"`
	Config         []byte          `json:"config"`
	IfName         string          `json:"ifName"`
	NetworkName    string          `json:"networkName"`
	NetNS          string          `json:"netns,omitempty"`
	CniArgs        [][2]string     `json:"cniArgs,omitempty"`
	CapabilityArgs map[string]any  `json:"capabilityArgs,omitempty"`
	RawResult      json.RawMessage `json:"result,omitempty"`
}

// CachedAttachment is an attachment of a container to a network as the
// result cache keeps it: what ADD was called with and what it returned.
type CachedAttachment struct {
	Network        string
	ContainerID    string
	IfName         string
	NetNS          string
	Args           [][2]string
	CapabilityArgs map[string]any
	Config         []byte  // the network configuration used at ADD
	Result         *Result // nil when the cached result is missing or unreadable
	Path           string  // the cache file
}

// cachePath is <dir>/results/<network>-<containerID>-<ifname>, libcni's
// layout.
func cachePath(dir, network, containerID, ifName string) string {
	return filepath.Join(dir, "results", network+"-"+containerID+"-"+ifName)
}

// writeCache stores an attachment: a temp file in the same directory,
// renamed over the old entry, so that no reader, and no crash, ever sees
// a torn entry in place of an old one (see writeFileAtomic). A writer
// killed before the rename leaves the temp file; DEL and GC sweep it
// (cachetemp.go).
func writeCache(dir string, list *NetworkConfigList, rt *RuntimeConf, result *Result) error {
	entry := cacheEntry{
		Kind:           cacheKind,
		ContainerID:    rt.ContainerID,
		Config:         list.Bytes,
		IfName:         rt.IfName,
		NetworkName:    list.Name,
		NetNS:          rt.NetNS,
		CniArgs:        rt.Args,
		CapabilityArgs: rt.CapabilityArgs,
	}
	if result != nil {
		entry.RawResult = result.Bytes()
	}
	data, err := json.Marshal(entry)
	if err != nil {
		return Errorf(CodeIOFailure, "cannot encode cache entry: %v", err)
	}
	path := cachePath(dir, list.Name, rt.ContainerID, rt.IfName)
	if err := writeFileAtomic(path, bytes.NewReader(data)); err != nil {
		return Errorf(CodeIOFailure, "cannot write result cache: %v", err)
	}
	return nil
}

// writeFileAtomic replaces path with content through a temp file and a
// rename: a reader sees the old entry or the new one, never part of one.
// The temp file is locked while it is written (createLockedTemp), so
// that a sweep can tell it from a dead writer's (cachetemp.go). content is
// an io.WriterTo, not a []byte, so that a test can stop or kill a real
// writer halfway through its write.
//
// The temp file is fsynced only when it replaces an entry. Then a crash
// must leave the old entry or the new one, and without the sync some
// filesystems can leave the new name pointing at an empty file. A new
// entry has no old state to keep: a crash can at worst leave it missing
// or empty, which readCache reports as corrupt and DEL goes on without
// (as it must anyway, without prevResult), and GC's valid-attachment
// list recovers. Its sync would cost every ADD about a millisecond of
// waiting for the disk (measured in podnet bench), for nothing. The
// directory is never synced, for the same reason.
func writeFileAtomic(path string, content io.WriterTo) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	_, statErr := os.Lstat(path)
	replacing := statErr == nil
	tmp, lock, err := createLockedTemp(path)
	if err != nil {
		return err
	}
	// Released last: until the temp file is renamed or removed, a sweep
	// must take it for a live writer's.
	defer lock.Close()
	cleanup := func() { _ = os.Remove(tmp.Name()) }
	if _, err := content.WriteTo(tmp); err != nil {
		tmp.Close()
		cleanup()
		return err
	}
	if replacing {
		if err := tmp.Sync(); err != nil {
			tmp.Close()
			cleanup()
			return err
		}
	}
	if err := tmp.Close(); err != nil {
		cleanup()
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		cleanup()
		return err
	}
	return nil
}

// readCache returns the cached attachment, or nil when there is none. A
// corrupt or empty entry is reported as errCorruptCache so that DEL can go
// on without it rather than be blocked by it.
func readCache(path string) (*CachedAttachment, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, Errorf(CodeIOFailure, "cannot read result cache: %v", err)
	}
	var e cacheEntry
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, fmt.Errorf("%w %s: %v", errCorruptCache, path, err)
	}
	if e.Kind != cacheKind {
		return nil, fmt.Errorf("%w %s: kind %q is not %q", errCorruptCache, path, e.Kind, cacheKind)
	}
	a := &CachedAttachment{
		Network:        e.NetworkName,
		ContainerID:    e.ContainerID,
		IfName:         e.IfName,
		NetNS:          e.NetNS,
		Args:           e.CniArgs,
		CapabilityArgs: e.CapabilityArgs,
		Config:         e.Config,
		Path:           path,
	}
	if len(e.RawResult) > 0 && string(e.RawResult) != "null" {
		// An unreadable result still leaves a usable attachment: DEL and
		// GC need its identity more than its result.
		a.Result, _ = ParseResult(e.RawResult)
	}
	return a, nil
}

// errCorruptCache marks a cache entry that cannot be decoded.
var errCorruptCache = errors.New("corrupt result cache entry")

// removeCache deletes a cache entry; a missing one is fine.
func removeCache(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Errorf(CodeIOFailure, "cannot remove result cache: %v", err)
	}
	return nil
}

// listCache returns every readable cached attachment in dir that keep
// accepts. nameHint, when not empty, must occur in the file name, which
// spares reading unrelated entries. Unreadable entries are skipped: one
// bad file must not hide the others from GC.
func listCache(dir, nameHint string, keep func(*CachedAttachment) bool) ([]*CachedAttachment, error) {
	entries, err := os.ReadDir(filepath.Join(dir, "results"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, Errorf(CodeIOFailure, "cannot list result cache: %v", err)
	}
	var out []*CachedAttachment
	for _, de := range entries {
		name := de.Name()
		if de.IsDir() || strings.HasPrefix(name, ".") || !strings.Contains(name, nameHint) {
			continue
		}
		a, err := readCache(filepath.Join(dir, "results", name))
		if err != nil || a == nil || !keep(a) {
			continue
		}
		out = append(out, a)
	}
	return out, nil
}

// CachedAttachment returns what the cache holds for an attachment, or nil.
// A corrupt entry is returned as an error; callers doing DEL ignore it.
func (r *Runtime) CachedAttachment(network string, rt *RuntimeConf) (*CachedAttachment, error) {
	if err := validateRuntimeConf(rt, false); err != nil {
		return nil, err
	}
	return readCache(cachePath(r.cacheDirFor(rt), network, rt.ContainerID, rt.IfName))
}

// CachedAttachments lists the attachments cached in cacheDir, of one
// network or (network == "") of all. An empty cacheDir is the Runtime's
// own; a caller that adds with RuntimeConf.CacheDir passes the same
// directory here, or GC would not see what those ADDs cached.
func (r *Runtime) CachedAttachments(cacheDir, network string) ([]*CachedAttachment, error) {
	hint := ""
	if network != "" {
		hint = network + "-"
	}
	return listCache(r.cacheDirOr(cacheDir), hint, func(a *CachedAttachment) bool { return network == "" || a.Network == network })
}

// CachedAttachmentsOf lists the attachments of one container cached in
// cacheDir (the Runtime's own when empty, as for CachedAttachments), to
// any network: what a sandbox's teardown must undo, whatever the
// configuration says today.
func (r *Runtime) CachedAttachmentsOf(cacheDir, containerID string) ([]*CachedAttachment, error) {
	if containerID == "" {
		return nil, Errorf(CodeInvalidEnvironment, "container ID is empty")
	}
	return listCache(r.cacheDirOr(cacheDir), "-"+containerID+"-", func(a *CachedAttachment) bool { return a.ContainerID == containerID })
}

// CachedNetworkConfigList returns the configuration an attachment was
// added with, so it can be torn down as it was set up even when the
// configuration on disk has changed since.
func (a *CachedAttachment) CachedNetworkConfigList() (*NetworkConfigList, error) {
	if len(a.Config) == 0 {
		return nil, Errorf(CodeInvalidNetworkConfig, "cached attachment %s has no configuration", a.Path)
	}
	list, err := ParseNetworkConfigList(a.Config, a.Path)
	if err != nil {
		return nil, err
	}
	if len(list.Plugins) == 0 {
		return nil, Errorf(CodeInvalidNetworkConfig, "cached attachment %s: configuration has no plugins", a.Path)
	}
	return list, nil
}
