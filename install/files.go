package install

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Plugins copies the named executables from srcDir into dstDir. Each is
// written to a temporary file in dstDir, synced and renamed over the old
// one: a process running the old binary keeps it (the rename swaps the
// directory entry, not the file), and a runtime starting the plugin sees
// the old or the new binary, never a partial one and never ETXTBSY.
func Plugins(srcDir, dstDir string, names []string) error {
	if err := os.MkdirAll(dstDir, 0o755); err != nil {
		return err
	}
	for _, name := range names {
		src := filepath.Join(srcDir, name)
		fi, err := os.Stat(src)
		if err != nil {
			return fmt.Errorf("plugin %s: %w", name, err)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("plugin %s: %s is not a regular file", name, src)
		}
		in, err := os.Open(src)
		if err != nil {
			return err
		}
		err = replace(filepath.Join(dstDir, name), 0o755, func(w io.Writer) error {
			_, err := io.Copy(w, in)
			return err
		})
		in.Close()
		if err != nil {
			return fmt.Errorf("installing plugin %s: %w", name, err)
		}
	}
	return nil
}

// WriteFile replaces path with data atomically.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return replace(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Remove deletes path; a missing file is fine.
func Remove(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// replace writes a temp file beside path with write, syncs it, and renames
// it over path. The temp name starts with a dot so that a conf dir reader
// never takes it for a config.
func replace(path string, perm fs.FileMode, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := write(tmp); err != nil {
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	ok = true
	return nil
}
