package wireguard

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadOrCreateKey: a missing file is created 0600 (its directory
// 0700) and read back as the same key at the next start; a file readable
// by others is tightened to 0600.
func TestLoadOrCreateKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "podnet", "wireguard.key")
	k1, created, err := LoadOrCreateKey(path)
	if err != nil || !created {
		t.Fatalf("first: created %v, %v", created, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	if di, _ := os.Stat(filepath.Dir(path)); di.Mode().Perm() != 0o700 {
		t.Errorf("key directory mode %v; want 0700", di.Mode().Perm())
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	k2, created, err := LoadOrCreateKey(path)
	if err != nil || created || k2 != k1 {
		t.Fatalf("second: created %v, same key %v, %v; want the kept key", created, k2 == k1, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v after reload; want 0600", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries; want the key file alone (no temporary file left)", len(entries))
	}
}

// TestLoadOrCreateKeyBad: a file that is not a key, or cannot be read,
// is a KeyError naming the file, never quoting its contents, and is
// never replaced by a new key.
func TestLoadOrCreateKeyBad(t *testing.T) {
	dir := t.TempDir()
	secret := "c2VjcmV0LWJ1dC1ub3QtYS1rZXk=" // base64, 20 bytes
	for _, tt := range []struct {
		name, content, want string
	}{
		{"short", secret, "a key of 20 bytes, want 32"},
		{"not base64", "not a key at all!", "not a base64 key"},
		{"empty", "", "a key of 0 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.name)
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, _, err := LoadOrCreateKey(path)
			var ke *KeyError
			if !errors.As(err, &ke) || ke.File != path || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("err %v; want a KeyError naming %s: %s", err, path, tt.want)
			}
			if tt.content != "" && strings.Contains(err.Error(), tt.content) {
				t.Errorf("error %q quotes the file's contents", err)
			}
			if b, _ := os.ReadFile(path); string(b) != tt.content {
				t.Error("the bad file was replaced")
			}
		})
	}
	t.Run("unreadable", func(t *testing.T) {
		path := filepath.Join(dir, "a-directory")
		if err := os.Mkdir(path, 0o700); err != nil {
			t.Fatal(err)
		}
		_, _, err := LoadOrCreateKey(path)
		var ke *KeyError
		if !errors.As(err, &ke) || !strings.Contains(err.Error(), "cannot be read") {
			t.Fatalf("err %v; want a KeyError: cannot be read", err)
		}
	})
}

// TestRotateKey: a new key replaces the file's (0600, no temporary file
// left); a missing file or a directory is a KeyError naming the path,
// and nothing is created.
func TestRotateKey(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "wireguard.key")
	old, _, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	key, err := RotateKey(path)
	if err != nil || key == old {
		t.Fatalf("rotate: %v, new key differs %v", err, key != old)
	}
	got, err := ReadKey(path)
	if err != nil || got != key {
		t.Fatalf("read back: %v, the new key %v", err, got == key)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v; want 0600", fi.Mode().Perm())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("directory holds %d entries; want the key file alone", len(entries))
	}
	missing := filepath.Join(dir, "none", "wireguard.key")
	var ke *KeyError
	if _, err := RotateKey(missing); !errors.As(err, &ke) || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing file: %v; want a KeyError naming it", err)
	}
	if _, err := os.Stat(filepath.Dir(missing)); err == nil {
		t.Error("rotating a missing file made its directory")
	}
	if _, err := RotateKey(dir); !errors.As(err, &ke) || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory: %v; want a KeyError", err)
	}
	if _, err := ReadKey(missing); !errors.As(err, &ke) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("read missing: %v; want a KeyError", err)
	}
}
