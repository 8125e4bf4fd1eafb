package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podnet/podnet/sandbox"
)

// netnsOf tells a sandbox that does not exist from sandbox records that
// cannot be read: the second is the store's error, not "does not exist".
func TestNetNSOfReportsStoreErrors(t *testing.T) {
	// saved returns a state dir holding the record of sandbox "a".
	saved := func(t *testing.T) string {
		t.Helper()
		dir := filepath.Join(t.TempDir(), "state")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := sandbox.NewStore(dir).Save(&sandbox.Sandbox{Name: "a", ID: "podnet-a-1", NetNS: "/run/netns/podnet-a"}); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	tests := []struct {
		name   string
		damage func(t *testing.T, dir string) // damages the store
		id     string
		want   string // in the error; "" for the namespace of "a"
	}{
		{name: "found", id: "podnet-a-1"},
		{name: "missing", id: "podnet-b-2", want: "does not exist"},
		{name: "state dir is a file", id: "podnet-a-1", want: "not a directory",
			damage: func(t *testing.T, dir string) {
				replace(t, dir, func(p string) error { return os.WriteFile(p, nil, 0o600) })
			}},
		{name: "record is a directory", id: "podnet-b-2", want: "is a directory",
			damage: func(t *testing.T, dir string) {
				// A symlink, since List skips what its directory listing
				// already shows as a directory.
				target := filepath.Join(t.TempDir(), "d")
				if err := os.Mkdir(target, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(target, filepath.Join(dir, "b.json")); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "corrupt record", id: "podnet-b-2", want: "b.json",
			damage: func(t *testing.T, dir string) {
				if err := os.WriteFile(filepath.Join(dir, "b.json"), []byte("{"), 0o600); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "found beside a corrupt record", id: "podnet-a-1",
			damage: func(t *testing.T, dir string) {
				if err := os.WriteFile(filepath.Join(dir, "b.json"), []byte("{"), 0o600); err != nil {
					t.Fatal(err)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := saved(t)
			if tc.damage != nil {
				tc.damage(t, dir)
			}
			e := &podEnv{store: sandbox.NewStore(dir)}
			got, err := e.netnsOf(tc.id)
			if tc.want == "" {
				if err != nil || got != "/run/netns/podnet-a" {
					t.Fatalf("netnsOf(%s) = %q, %v", tc.id, got, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.id) {
				t.Fatalf("netnsOf(%s) = %q, %v; want an error naming the sandbox and %q", tc.id, got, err, tc.want)
			}
			if tc.name != "missing" && errors.Is(err, fs.ErrNotExist) {
				t.Errorf("a store that cannot be read reported as a missing sandbox: %v", err)
			}
		})
	}
}

// replace removes path and makes something else there with mk.
func replace(t *testing.T, path string, mk func(string) error) {
	t.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	if err := mk(path); err != nil {
		t.Fatal(err)
	}
}
