// Package record is the on-disk log the test plugin keeps of its
// invocations, and the reader tests use to see what a runtime did: which
// verbs, in which order, with which environment and configuration.
//
// It holds no test logic and must not depend on anything but the
// standard library and golang.org/x/sys.
package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Record is one invocation of the test plugin.
type Record struct {
	// Name is the file name without ".json". Names sort in the order the
	// invocations started.
	Name    string            `json:"-"`
	Command string            `json:"command"`
	Env     map[string]string `json:"env"` // the CNI_* variables
	// Stdin is the configuration exactly as received (a string, not a
	// JSON value: encoding would reformat it, and it may not be JSON).
	Stdin string `json:"stdin"`
	PID   int    `json:"pid"`
	PGID  int    `json:"pgid"`
	// NetNS is the network namespace the plugin ran in, as the link
	// /proc/self/ns/net reads ("net:[inode]").
	NetNS string `json:"netns"`
}

// Config decodes Stdin into v.
func (r *Record) Config(v any) error { return json.Unmarshal([]byte(r.Stdin), v) }

const (
	ext         = ".json"
	childPrefix = "child-"
	tmpPrefix   = ".tmp-"
)

// Write adds r to dir. The name is the system-wide monotonic clock in
// nanoseconds and the pid, so that the invocations of plugins run one
// after another sort in that order, even across processes. The file
// appears complete or not at all.
func Write(dir string, r *Record) error {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return err
	}
	r.Name = fmt.Sprintf("%020d-%07d", ts.Nano(), os.Getpid())
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(dir, r.Name+ext, b)
}

func writeAtomic(dir, name string, b []byte) error {
	tmp := filepath.Join(dir, tmpPrefix+name)
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, name))
}

// Read returns the records in dir, oldest first.
func Read(dir string) ([]Record, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []Record
	for _, e := range entries {
		n := e.Name()
		if !strings.HasSuffix(n, ext) || strings.HasPrefix(n, tmpPrefix) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return nil, err
		}
		var r Record
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("record %s: %w", n, err)
		}
		r.Name = strings.TrimSuffix(n, ext)
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Record) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Commands lists the verbs of records, in order: the shape most tests
// assert on.
func Commands(recs []Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Command
	}
	return out
}

// WriteChildPID notes in dir the pid of a child the plugin left running.
func WriteChildPID(dir string, pid int) error {
	return writeAtomic(dir, childPrefix+strconv.Itoa(pid)+".pid", []byte(strconv.Itoa(pid)))
}

// ChildPIDs returns the pids noted by WriteChildPID.
func ChildPIDs(dir string) ([]int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range entries {
		n := e.Name()
		if !strings.HasPrefix(n, childPrefix) || !strings.HasSuffix(n, ".pid") {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(n, childPrefix), ".pid"))
		if err != nil {
			return nil, errors.New("bad child pid file " + n)
		}
		out = append(out, pid)
	}
	slices.Sort(out)
	return out, nil
}
