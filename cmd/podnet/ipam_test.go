package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/bolt"
)

func TestIPAMCommands(t *testing.T) {
	podnet := testutil.BuildBinary(t, "./cmd/podnet", t.TempDir())
	dir := t.TempDir()
	db := filepath.Join(dir, "ipam.db")
	run := func(wantCode int, args ...string) string {
		t.Helper()
		cmd := exec.Command(podnet, append([]string{"--cache-dir", filepath.Join(dir, "cache"), "ipam", "--store", "bolt:" + db}, args...)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		_ = cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != wantCode {
			t.Fatalf("podnet ipam %v: exit %d, want %d\n%s%s", args, code, wantCode, out.String(), errb.String())
		}
		return out.String() + errb.String()
	}
	run(0, "pool", "add", "p1", "10.108.0.0/16", "--block-size", "24")
	if out := run(1, "pool", "add", "p2", "10.108.5.0/24"); !strings.Contains(out, "overlap") {
		t.Errorf("overlapping pool: %s", out)
	}
	if out := run(0, "pool", "ls"); !strings.Contains(out, "p1    10.108.0.0/16  /24") {
		t.Errorf("pool ls: %s", out)
	}

	// Allocate as two nodes' plugins would; nothing is in this machine's
	// cache, so node-a's addresses count as leaked.
	st, err := bolt.Open(context.Background(), bolt.Options{Path: db})
	if err != nil {
		t.Fatal(err)
	}
	a := ipam.New(st, ipam.Config{})
	for _, x := range []struct{ handle, node string }{{"net.c1", "node-a"}, {"net.c2", "node-a"}, {"net.c3", "node-b"}} {
		if _, err := a.AutoAssign(context.Background(), ipam.AutoAssignArgs{Handle: x.handle, Node: x.node, Num4: 1}); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()

	if out := run(0, "show", "--blocks"); !strings.Contains(out, "p1    10.108.0.0/16  /24         2       3") || !strings.Contains(out, "node-a") {
		t.Errorf("show: %s", out)
	}
	if out := run(0, "check"); !strings.Contains(out, "clean") {
		t.Errorf("check without liveness: %s", out)
	}
	report := run(1, "check", "--node", "node-a", "-o", "json")
	if strings.Count(report, `"Handle": "net.c`) != 2 {
		t.Fatalf("leak report: %s", report)
	}
	rep := filepath.Join(dir, "report.json")
	if err := os.WriteFile(rep, []byte(report), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := run(0, "release", "--from-report", rep); !strings.Contains(out, "released handle net.c1") || !strings.Contains(out, "released handle net.c2") {
		t.Errorf("release: %s", out)
	}
	run(0, "check", "--node", "node-a")
	if out := run(1, "pool", "rm", "p1"); !strings.Contains(out, "still has 1 allocated") {
		t.Errorf("pool rm with an allocation: %s", out)
	}
	checkIPAMJSON(t, run)
	run(0, "node", "rm", "node-a")
	run(0, "node", "rm", "node-b")
	run(0, "pool", "rm", "p1")
	if out := run(0, "show", "-o", "json"); !strings.Contains(out, `"allocated": 0`) || strings.Contains(out, "p1") {
		t.Errorf("after removal: %s", out)
	}
}

// checkIPAMJSON releases handle net.c3 and lists the one pool, p1 of
// /24 blocks, with -o json.
func checkIPAMJSON(t *testing.T, run func(wantCode int, args ...string) string) {
	t.Helper()
	var rel releaseReport
	if out := run(0, "release", "--handle", "net.c3", "-o", "json"); json.Unmarshal([]byte(out), &rel) != nil || len(rel.Handles) != 1 || rel.Handles[0] != "net.c3" {
		t.Errorf("release -o json: %s", out)
	}
	var pools poolList
	if out := run(0, "pool", "ls", "-o", "json"); json.Unmarshal([]byte(out), &pools) != nil || len(pools.Pools) != 1 || pools.Pools[0].BlockSize != 24 {
		t.Errorf("pool ls -o json: %s", out)
	}
}
