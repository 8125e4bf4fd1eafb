package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podnet/podnet/agent/wireguard"
)

// TestWireGuardRotateKey: the command writes a new key over the file
// and prints its public key, never the private one; a path without a
// key file is refused, naming it, and nothing is created.
func TestWireGuardRotateKey(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "wireguard.key")
	old, _, err := wireguard.LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"wireguard", "rotate-key", "--key-file", path, "--wait", "0"})
	if err := root.Execute(); err != nil {
		t.Fatalf("rotate-key: %v\n%s", err, errOut.String())
	}
	key, err := wireguard.ReadKey(path)
	if err != nil || key == old {
		t.Fatalf("key file after rotate-key: %v, changed %v", err, key != old)
	}
	if got := strings.TrimSpace(out.String()); got != key.PublicKey().String() {
		t.Errorf("printed %q; want the new public key %s", got, key.PublicKey())
	}
	if all := out.String() + errOut.String(); strings.Contains(all, key.String()) || strings.Contains(all, old.String()) {
		t.Error("the output holds a private key")
	}
	missing := filepath.Join(dir, "other", "wireguard.key")
	root = newRootCommand()
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"wireguard", "rotate-key", "--key-file", missing, "--wait", "0"})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing key file: %v; want an error naming it", err)
	}
	if _, err := os.Stat(filepath.Dir(missing)); err == nil {
		t.Error("rotate-key of a missing file made its directory")
	}
}
