package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/podnet/podnet/netns"
)

// DefaultStateDir holds sandbox records. It is under /run, like the
// namespaces themselves: neither survives a reboot.
const DefaultStateDir = "/run/podnet/sandboxes"

// NamePrefix starts the name of every namespace podnet creates, so they
// are recognisable in `ip netns` and never confused with others'.
const NamePrefix = "podnet-"

// Sandbox is one pod sandbox.
type Sandbox struct {
	Name      string    `json:"name"`      // the pod's name
	Namespace string    `json:"namespace"` // the pod's namespace (Kubernetes sense)
	ID        string    `json:"id"`        // the CNI container ID
	NetNS     string    `json:"netns"`     // the network namespace path
	Network   string    `json:"network,omitempty"`
	IPs       []string  `json:"ips,omitempty"`
	Created   time.Time `json:"created"`
}

// Store keeps sandbox records in a directory.
type Store struct {
	dir string
}

// NewStore returns a Store in dir (DefaultStateDir when empty).
func NewStore(dir string) *Store {
	if dir == "" {
		dir = DefaultStateDir
	}
	return &Store{dir: dir}
}

var namePattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,40}[a-z0-9])?$`)

// ValidateName checks a sandbox name: a DNS label-like name short enough
// for a namespace file name with podnet's prefix.
func ValidateName(name string) error {
	if !namePattern.MatchString(name) {
		return fmt.Errorf("sandbox name %q: want lower-case letters, digits, '.' or '-', at most 42 characters, starting and ending with a letter or digit", name)
	}
	return nil
}

// RandomName returns a fresh name like "run-3f9a1c".
func RandomName(prefix string) string {
	return prefix + "-" + randomHex(3)
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

// Create makes the namespace and the record of a new sandbox. The record
// is written before the namespace exists, so a crash in between leaves a
// record that GC removes rather than a namespace nobody knows of.
func (s *Store) Create(namespace, name string) (*Sandbox, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if namespace == "" {
		namespace = "default"
	}
	sb := &Sandbox{
		Name:      name,
		Namespace: namespace,
		ID:        NamePrefix + name + "-" + randomHex(6),
		NetNS:     netns.NamedPath(NamePrefix + name),
		Created:   time.Now().UTC().Truncate(time.Second),
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(s.path(name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("sandbox %q already exists", name)
	}
	if err != nil {
		return nil, err
	}
	f.Close()
	if err := s.Save(sb); err != nil {
		_ = os.Remove(s.path(name))
		return nil, err
	}
	if _, err := netns.NewNamed(NamePrefix + name); err != nil {
		_ = os.Remove(s.path(name))
		return nil, fmt.Errorf("sandbox %q: %w", name, err)
	}
	return sb, nil
}

// Save writes a sandbox's record (atomically: temp file and rename).
func (s *Store) Save(sb *Sandbox) error {
	data, err := json.MarshalIndent(sb, "", "  ")
	if err != nil {
		return err
	}
	tmp := s.path(sb.Name) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, s.path(sb.Name))
}

// Get returns the named sandbox.
func (s *Store) Get(name string) (*Sandbox, error) {
	data, err := os.ReadFile(s.path(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no sandbox %q: %w", name, fs.ErrNotExist)
	}
	if err != nil {
		return nil, err
	}
	var sb Sandbox
	if err := json.Unmarshal(data, &sb); err != nil {
		return nil, fmt.Errorf("sandbox record %s: %w", s.path(name), err)
	}
	return &sb, nil
}

// List returns every recorded sandbox, by name. Unreadable records are
// returned as errors alongside the rest.
func (s *Store) List() ([]*Sandbox, error) {
	entries, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*Sandbox
	var errs []error
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || e.IsDir() {
			continue
		}
		sb, err := s.Get(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, sb)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, errors.Join(errs...)
}

// Delete removes the sandbox's namespace and record. It is idempotent.
func (s *Store) Delete(name string) error {
	if err := netns.DeleteNamed(NamePrefix + name); err != nil {
		return fmt.Errorf("sandbox %q: %w", name, err)
	}
	if err := os.Remove(s.path(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Alive reports whether the sandbox's namespace still exists.
func (sb *Sandbox) Alive() bool { return netns.IsNetNS(sb.NetNS) == nil }

func (s *Store) path(name string) string { return filepath.Join(s.dir, name+".json") }

// Dir is the state directory.
func (s *Store) Dir() string { return s.dir }
