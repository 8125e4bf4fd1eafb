package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/internal/testplugin/record"
	"github.com/podnet/podnet/internal/testutil"
)

// `pod add --timeout 2s` on a plugin that hangs, at ADD and at the DEL
// that rolls it back, and leaves a child behind each time: podnet returns
// within a few seconds (it took 32 s when the rollback had a fixed 30 s),
// and no process of either plugin run outlives it.
func TestPodAddTimeoutBoundsRollback(t *testing.T) {
	n := newNode(t)
	testutil.BuildBinary(t, "./internal/testplugin", n.binDir)
	rec := t.TempDir()
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"hang","plugins":[
		{"type":"testplugin","record":%q,"sleep":"5m","spawnChild":true,"childSleep":"5m"}]}`, rec)
	if err := os.WriteFile(filepath.Join(n.confDir, "20-hang.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	_, pod := testutil.NewNetNS(t)

	start := time.Now()
	_, stderr, code := n.run("pod", "add", "--timeout", "2s", "hang", pod)
	took := time.Since(start)
	if code == 0 || !strings.Contains(stderr, "did not finish") || !strings.Contains(stderr, "rollback after failed ADD") {
		t.Errorf("exit %d, stderr %q; want the ADD's timeout and the rollback's", code, stderr)
	}
	t.Logf("pod add --timeout 2s returned after %v", took)
	if took >= 8*time.Second {
		t.Error("want under 8 s: twice the budget and a kill grace or two")
	}

	recs, err := record.Read(rec)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(record.Commands(recs), " "); got != "ADD DEL" {
		t.Errorf("calls %q, want ADD DEL", got)
	}
	pids, err := record.ChildPIDs(rec)
	if err != nil || len(pids) != len(recs) {
		t.Errorf("child pids %v (%v), want one per call", pids, err)
	}
	for _, r := range recs {
		pids = append(pids, r.PID)
	}
	for _, pid := range pids {
		if !exited(pid) {
			// Ours (a plugin this test's podnet started): do not leak it.
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("process %d outlived pod add", pid)
		}
	}
	n.assertClean()
}

// exited reports whether pid is gone or a zombie: killed, waiting only
// for init, its new parent, to reap it. SIGKILL takes effect at the
// victim's next scheduling, so it is given a moment.
func exited(pid int) bool {
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if testutil.ProcessGone(pid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// TestPodVerbsJSON: pod add, check, status and del with -o json on the
// real podnet plugin: one document each, naming the attachment; text
// stays as it was (check and del silent).
func TestPodVerbsJSON(t *testing.T) {
	n := newNode(t)
	_, pod := testutil.NewNetNS(t)
	out, stderr, code := n.run("pod", "add", "runnet", pod, "-o", "json")
	var res cni.Result
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || len(res.IPs) != 1 {
		t.Fatalf("pod add -o json: exit %d\n%s\n%s", code, out, stderr)
	}
	if out, _, code = n.run("pod", "check", "runnet", pod); code != 0 || out != "" {
		t.Errorf("pod check: exit %d, printed %q", code, out)
	}
	var att attachmentReport
	if out, _, code = n.run("pod", "check", "runnet", pod, "-o", "json"); code != 0 || json.Unmarshal([]byte(out), &att) != nil || !att.OK || att.Verb != "check" || att.NetNS != pod {
		t.Errorf("pod check -o json: exit %d %s", code, out)
	}
	var st podStatusReport
	if out, _, code = n.run("pod", "status", "runnet", pod, "-o", "json"); code != 0 || json.Unmarshal([]byte(out), &st) != nil || !st.Ready || st.Attachment == nil || len(st.Attachment.IPs) != 1 {
		t.Errorf("pod status -o json: exit %d %s", code, out)
	}
	if out, _, code = n.run("pod", "del", "runnet", pod, "-o", "json"); code != 0 || json.Unmarshal([]byte(out), &att) != nil || att.Verb != "del" || att.Network != "runnet" {
		t.Errorf("pod del -o json: exit %d %s", code, out)
	}
	n.assertClean()
}
