package sysctlrecord

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	if rec, err := Load(filepath.Join(dir, "missing.json")); err != nil || len(rec) != 0 {
		t.Errorf("missing file: %v %v", rec, err)
	}
	for body, want := range map[string]string{
		`{`: "sysctls.json", `{"version":2,"sysctls":{}}`: "version 2",
	} {
		p := filepath.Join(dir, FileName)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(p); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %q", body, err, want)
		}
	}
}

// The writer records a setting's first original before changing it,
// keeps that original across later changes, and records nothing it
// need not change.
func TestWriter(t *testing.T) {
	testutil.RequireRoot(t)
	_, ns := testutil.NewNodeNetNS(t)
	path := filepath.Join(t.TempDir(), FileName)
	w := Writer(path)
	err := netns.Do(ns, func() error {
		// Already as wanted: neither written nor recorded.
		if err := w([]dataplane.Sysctl{{Key: "net/ipv4/ip_forward", Value: "0"}}); err != nil {
			return err
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("record written for a setting left as it was: %v", err)
		}
		for _, v := range []string{"1", "0", "1"} {
			if err := w([]dataplane.Sysctl{{Key: "net/ipv4/ip_forward", Value: v}}); err != nil {
				return err
			}
		}
		got, err := dataplane.ReadSysctl("net/ipv4/ip_forward")
		if err != nil || got != "1" {
			t.Errorf("ip_forward %q %v", got, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if e := rec["net/ipv4/ip_forward"]; len(rec) != 1 || e != (Entry{Original: "0", Set: "1"}) {
		t.Errorf("record %+v", rec)
	}
}
