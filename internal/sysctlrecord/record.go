package sysctlrecord

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"

	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/install"
)

// FileName is the record's name in podnet's state directory.
const FileName = "sysctls.json"

// Entry is one recorded setting: the value it had before podnet first
// changed it, and the value podnet set. Removal restores Original only
// while the setting still holds Set: a value someone changed since is
// theirs.
type Entry struct {
	Original string `json:"original"`
	Set      string `json:"set"`
}

// file is the record's format on disk; version 1 is the only one.
type file struct {
	Version int              `json:"version"`
	Sysctls map[string]Entry `json:"sysctls"`
}

const version = 1

// Load reads the record at path, keyed by sysctl key (relative to
// /proc/sys, '/'-separated). A missing file is an empty record.
func Load(path string) (map[string]Entry, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]Entry{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sysctl record: %w", err)
	}
	var f file
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("sysctl record %s: %w", path, err)
	}
	if f.Version != version {
		return nil, fmt.Errorf("sysctl record %s: version %d, want %d", path, f.Version, version)
	}
	if f.Sysctls == nil {
		f.Sysctls = map[string]Entry{}
	}
	return f.Sysctls, nil
}

// save writes the record atomically.
func save(path string, rec map[string]Entry) error {
	b, err := json.MarshalIndent(file{Version: version, Sysctls: rec}, "", "  ")
	if err != nil {
		return err
	}
	if err := install.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("sysctl record: %w", err)
	}
	return nil
}

// Keys returns the record's keys in order.
func Keys(rec map[string]Entry) []string {
	keys := make([]string, 0, len(rec))
	for k := range rec {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Writer returns a function that writes settings as
// dataplane.WriteSysctls does, in the calling thread's network
// namespace, and first records at path the original value of each one
// it changes. A setting already recorded keeps its first original: the
// record says what the node had before podnet, however many times
// podnet set it since. A setting already as wanted is neither written
// nor recorded.
func Writer(path string) func([]dataplane.Sysctl) error {
	return func(list []dataplane.Sysctl) error {
		for _, s := range list {
			cur, err := dataplane.ReadSysctl(s.Key)
			if err != nil {
				return err
			}
			if cur == s.Value {
				continue
			}
			if err := note(path, s, cur); err != nil {
				return err
			}
			if err := dataplane.WriteSysctls([]dataplane.Sysctl{s}); err != nil {
				return err
			}
		}
		return nil
	}
}

// note records that s is about to replace cur.
func note(path string, s dataplane.Sysctl, cur string) error {
	rec, err := Load(path)
	if err != nil {
		return err
	}
	e, ok := rec[s.Key]
	if !ok {
		e.Original = cur
	}
	if ok && e.Set == s.Value {
		return nil
	}
	e.Set = s.Value
	rec[s.Key] = e
	return save(path, rec)
}
