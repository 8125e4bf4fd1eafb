package wireguard

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// DefaultKeyFile is where the node's private key is kept.
const DefaultKeyFile = "/var/lib/podnet/wireguard.key"

// KeyError is a key file that cannot be used: the file and why. It never
// holds the key.
type KeyError struct {
	File, Reason string
}

func (e *KeyError) Error() string { return fmt.Sprintf("wireguard key file %s: %s", e.File, e.Reason) }

// LoadOrCreateKey reads the private key from path, or, when there is no
// such file, generates one and writes it there with mode 0600 (the
// directory made 0700 if it is missing). created says which. A file that
// cannot be read or does not hold 32 bytes of base64 is an error: the
// node must not make itself a new identity behind its peers' back, nor
// run without one.
func LoadOrCreateKey(path string) (key wgtypes.Key, created bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key, err = createKey(path)
		return key, err == nil, err
	}
	if key, err = keyFrom(path, b, err); err != nil {
		return key, false, err
	}
	fi, err := os.Stat(path)
	if err == nil && fi.Mode().Perm()&0o077 != 0 {
		// Readable by others: tighten it rather than refuse, as the key
		// is the node's identity and refusing would only stop
		// encryption.
		if err := os.Chmod(path, 0o600); err != nil {
			return key, false, &KeyError{File: path, Reason: fmt.Sprintf("mode %v, and cannot be made 0600: %v", fi.Mode().Perm(), err)}
		}
	}
	return key, false, nil
}

// ReadKey reads the private key from path, which must hold one: a
// missing file is an error here too (the running agent's check; only a
// start creates the file).
func ReadKey(path string) (wgtypes.Key, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return wgtypes.Key{}, &KeyError{File: path, Reason: "missing"}
	}
	return keyFrom(path, b, err)
}

// RotateKey writes a new private key over the key file at path, as
// LoadOrCreateKey writes a first one (mode 0600, atomically: a reader
// sees the old key or the new one, never half of either). The file must
// exist: a path with no key is more likely a mistake than a node to
// give a first key to, and the agent creates that itself.
func RotateKey(path string) (wgtypes.Key, error) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return wgtypes.Key{}, &KeyError{File: path, Reason: "missing: the agent creates it at its first start with encryption on; nothing to rotate"}
	case err != nil:
		return wgtypes.Key{}, &KeyError{File: path, Reason: fmt.Sprintf("cannot be read: %v", errors.Unwrap(err))}
	case !fi.Mode().IsRegular():
		return wgtypes.Key{}, &KeyError{File: path, Reason: fmt.Sprintf("not a regular file (%v)", fi.Mode().Type())}
	}
	return createKey(path)
}

// keyFrom is the key in the contents b of the file at path, read with
// error err.
func keyFrom(path string, b []byte, err error) (wgtypes.Key, error) {
	if err != nil {
		return wgtypes.Key{}, &KeyError{File: path, Reason: fmt.Sprintf("cannot be read: %v", errors.Unwrap(err))}
	}
	key, err := parseKey(b)
	if err != nil {
		return key, &KeyError{File: path, Reason: err.Error()}
	}
	return key, nil
}

// parseKey reads a key file's contents: one base64 key, with or without
// a newline after it. Its errors never quote the contents.
func parseKey(b []byte) (wgtypes.Key, error) {
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil {
		return wgtypes.Key{}, errors.New("not a base64 key")
	}
	if len(raw) != wgtypes.KeyLen {
		return wgtypes.Key{}, fmt.Errorf("a key of %d bytes, want %d", len(raw), wgtypes.KeyLen)
	}
	return wgtypes.Key(raw), nil
}

// createKey generates a private key and writes it to path atomically (a
// temporary file renamed), so that a crash never leaves half a key.
func createKey(path string) (wgtypes.Key, error) {
	key, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		return key, fmt.Errorf("wireguard: generate key: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return key, &KeyError{File: path, Reason: fmt.Sprintf("cannot make its directory: %v", err)}
	}
	f, err := os.CreateTemp(dir, ".wireguard.key-*")
	if err != nil {
		return key, &KeyError{File: path, Reason: fmt.Sprintf("cannot be written: %v", err)}
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString(key.String() + "\n")
	if err == nil {
		err = f.Chmod(0o600)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return key, &KeyError{File: path, Reason: fmt.Sprintf("cannot be written: %v", err)}
	}
	return key, nil
}
