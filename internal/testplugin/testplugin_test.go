package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/internal/testplugin/record"
	"github.com/podnet/podnet/internal/testutil"
)

type outcome struct {
	status         int
	stdout, stderr string
}

func invoke(t *testing.T, bin, cmd, stdin string, extraEnv ...string) outcome {
	t.Helper()
	c := exec.Command(bin)
	c.Env = append([]string{"CNI_COMMAND=" + cmd, "CNI_CONTAINERID=c1", "CNI_NETNS=/run/netns/fake", "CNI_IFNAME=eth0", "CNI_PATH=/x"}, extraEnv...)
	c.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	err := c.Run()
	r := outcome{stdout: stdout.String(), stderr: stderr.String()}
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		r.status = exitErr.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return r
}

func conf(extra string) string {
	s := `{"cniVersion":"1.1.0","name":"n","type":"testplugin"`
	if extra != "" {
		s += "," + extra
	}
	return s + "}"
}

func TestTestPlugin(t *testing.T) {
	bin := testutil.BuildBinary(t, "./internal/testplugin", t.TempDir())

	t.Run("record", func(t *testing.T) {
		dir := t.TempDir()
		c := conf(`"record":` + quote(dir))
		for _, cmd := range []string{"ADD", "CHECK", "DEL", "STATUS", "GC"} {
			if r := invoke(t, bin, cmd, c, "CNI_ARGS=A=b"); r.status != 0 {
				t.Fatalf("%s: %+v", cmd, r)
			}
		}
		invoke(t, bin, "VERSION", `{"cniVersion":"1.1.0"}`, "PODNET_TESTPLUGIN_RECORD="+dir)
		recs, err := record.Read(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := record.Commands(recs); !slices.Equal(got, []string{"ADD", "CHECK", "DEL", "STATUS", "GC", "VERSION"}) {
			t.Fatalf("commands %v", got)
		}
		if recs[0].Env["CNI_ARGS"] != "A=b" || recs[0].Env["CNI_IFNAME"] != "eth0" || recs[0].Stdin != c || recs[0].PID == 0 {
			t.Fatalf("record %+v", recs[0])
		}
	})

	t.Run("default result", func(t *testing.T) {
		r := invoke(t, bin, "ADD", conf(`"ip":"10.0.0.2/24"`))
		res, err := cni.ParseResult([]byte(r.stdout))
		if r.status != 0 || err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		if len(res.Interfaces) != 1 || res.Interfaces[0].Name != "eth0" || res.Interfaces[0].Sandbox != "/run/netns/fake" || res.IPs[0].Address.String() != "10.0.0.2/24" {
			t.Fatalf("result %s", r.stdout)
		}
	})

	t.Run("derived from prevResult", func(t *testing.T) {
		c := `{"cniVersion":"1.0.0","name":"n","type":"t","ifname":"second","prevResult":{"cniVersion":"0.4.0","interfaces":[{"name":"first"}],"ips":[{"version":"4","interface":0,"address":"10.0.0.2/24"}]}}`
		r := invoke(t, bin, "ADD", c)
		res, err := cni.ParseResult([]byte(r.stdout))
		if r.status != 0 || err != nil || res.CNIVersion != "1.0.0" || len(res.Interfaces) != 2 || res.Interfaces[1].Name != "second" || len(res.IPs) != 1 {
			t.Fatalf("%+v: %v", r, err)
		}
	})

	t.Run("result as is", func(t *testing.T) {
		raw := `{"cniVersion":"0.3.1","ips":[{"version":"4","address":"10.0.0.9/24"}]}`
		r := invoke(t, bin, "ADD", conf(`"result":`+raw))
		if r.status != 0 || r.stdout != raw+"\n" {
			t.Fatalf("%+v", r)
		}
	})

	t.Run("fail", func(t *testing.T) {
		r := invoke(t, bin, "DEL", conf(`"fail":{"DEL":{"code":11,"msg":"later"}}`))
		var e cni.Error
		if r.status != 1 || json.Unmarshal([]byte(r.stdout), &e) != nil || e.Code != 11 || e.Msg != "later" {
			t.Fatalf("%+v", r)
		}
		if r := invoke(t, bin, "ADD", conf(`"fail":{"DEL":{"code":11,"msg":"later"}}`)); r.status != 0 {
			t.Fatalf("ADD should not fail: %+v", r)
		}
	})

	t.Run("crash", func(t *testing.T) {
		r := invoke(t, bin, "ADD", conf(`"crash":["CHECK","ADD"]`))
		if r.status != 2 || r.stdout != "" || !strings.Contains(r.stderr, "crashing") {
			t.Fatalf("%+v", r)
		}
	})

	t.Run("garbage", func(t *testing.T) {
		r := invoke(t, bin, "ADD", conf(`"garbage":"*"`))
		if r.status != 0 || json.Valid([]byte(r.stdout)) || r.stdout == "" {
			t.Fatalf("%+v", r)
		}
	})

	t.Run("null", func(t *testing.T) {
		if r := invoke(t, bin, "ADD", conf(`"null":true`)); r.status != 0 || r.stdout != "null\n" {
			t.Fatalf("%+v", r)
		}
	})

	t.Run("sleep", func(t *testing.T) {
		start := time.Now()
		if r := invoke(t, bin, "DEL", conf(`"sleep":{"DEL":"200ms"}`)); r.status != 0 {
			t.Fatalf("%+v", r)
		}
		if time.Since(start) < 200*time.Millisecond {
			t.Fatal("did not sleep")
		}
	})

	t.Run("old plugin", func(t *testing.T) {
		env := "PODNET_TESTPLUGIN_VERSIONS=0.3.1,0.4.0"
		r := invoke(t, bin, "VERSION", `{"cniVersion":"1.1.0"}`, env)
		var vi cni.VersionInfo
		if r.status != 0 || json.Unmarshal([]byte(r.stdout), &vi) != nil || vi.CNIVersion != "0.4.0" || !slices.Equal(vi.SupportedVersions, []string{"0.3.1", "0.4.0"}) {
			t.Fatalf("%+v", r)
		}
		r = invoke(t, bin, "ADD", conf(""), env)
		if r.status != 1 || !strings.Contains(r.stdout, `"code":1`) {
			t.Fatalf("%+v", r)
		}
	})

	t.Run("bad stdin", func(t *testing.T) {
		if r := invoke(t, bin, "ADD", "{"); r.status != 1 || !strings.Contains(r.stdout, `"code":6`) {
			t.Fatalf("%+v", r)
		}
	})

	t.Run("spawn child", func(t *testing.T) {
		dir := t.TempDir()
		r := invoke(t, bin, "ADD", conf(`"record":`+quote(dir)+`,"spawnChild":true,"childSleep":"30s"`))
		if r.status != 0 {
			t.Fatalf("%+v", r)
		}
		pids, err := record.ChildPIDs(dir)
		if err != nil || len(pids) != 1 {
			t.Fatalf("child pids %v: %v", pids, err)
		}
		recs, _ := record.Read(dir)
		// The child is ours (this test started the plugin that started
		// it): end it by its pid, after checking it is the plugin's.
		pid := pids[0]
		if pgid, err := syscall.Getpgid(pid); err != nil || pgid != recs[0].PGID {
			t.Fatalf("child %d pgid %d (%v), want the plugin's %d", pid, pgid, err, recs[0].PGID)
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	})
}

// With ignoreTerm, SIGTERM to the plugin's group ends neither the plugin
// nor its child: what a runtime's SIGKILL must then deal with.
func TestIgnoreTerm(t *testing.T) {
	bin := testutil.BuildBinary(t, "./internal/testplugin", t.TempDir())
	dir := t.TempDir()
	c := exec.Command(bin)
	c.Env = []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=c1", "CNI_NETNS=/run/netns/fake", "CNI_IFNAME=eth0", "CNI_PATH=/x"}
	c.Stdin = strings.NewReader(conf(`"record":` + quote(dir) + `,"spawnChild":true,"childSleep":"30s","ignoreTerm":true,"sleep":"30s"`))
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := c.Process.Pid
	// The plugin and its child are ours: whatever happens, they end.
	defer func() {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		_ = c.Wait()
	}()
	var child int
	for deadline := time.Now().Add(10 * time.Second); child == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the child's pid was never written")
		}
		if pids, _ := record.ChildPIDs(dir); len(pids) == 1 {
			child = pids[0]
		}
	}
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	for _, pid := range []int{pgid, child} {
		if testutil.ProcessGone(pid) {
			t.Errorf("process %d did not survive SIGTERM", pid)
		}
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
