package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

func TestResult(t *testing.T) {
	addrs := []netip.Prefix{
		netip.MustParsePrefix("127.0.0.1/8"),
		netip.MustParsePrefix("127.0.0.2/8"),
		netip.MustParsePrefix("::1/128"),
	}
	r := result("/run/netns/x", addrs)
	if len(r.Interfaces) != 1 || *r.Interfaces[0] != (cni.Interface{Name: "lo", Mac: "00:00:00:00:00:00", Sandbox: "/run/netns/x"}) {
		t.Fatalf("interfaces %+v", r.Interfaces[0])
	}
	var got []string
	for _, ip := range r.IPs {
		if ip.Interface == nil || *ip.Interface != 0 {
			t.Errorf("%s is not on interface 0", ip.Address)
		}
		got = append(got, ip.Address.String())
	}
	if !slices.Equal(got, []string{"127.0.0.1/8", "::1/128"}) {
		t.Fatalf("ips %v", got)
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
}

// loUp reports whether lo is up in the namespace at path.
func loUp(t *testing.T, path string) bool {
	t.Helper()
	var up bool
	err := netns.Do(path, func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		up = lo.Attrs().Flags&net.FlagUp != 0
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return up
}

// invoke runs the plugin once, in process or as the binary at bin.
type invoke func(t *testing.T, env map[string]string, stdin string) (status int, stdout string)

func inProcess(t *testing.T, env map[string]string, stdin string) (int, string) {
	var stdout, stderr bytes.Buffer
	status := plugin().Run(func(k string) string { return env[k] }, strings.NewReader(stdin), &stdout, &stderr)
	if stderr.Len() > 0 {
		t.Logf("stderr: %s", stderr.String())
	}
	return status, stdout.String()
}

func execBinary(bin string) invoke {
	return func(t *testing.T, env map[string]string, stdin string) (int, string) {
		cmd := exec.Command(bin)
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		cmd.Stdin = strings.NewReader(stdin)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if stderr.Len() > 0 {
			t.Logf("stderr: %s", stderr.String())
		}
		var exitErr *exec.ExitError
		switch {
		case err == nil:
			return 0, stdout.String()
		case errors.As(err, &exitErr):
			return exitErr.ExitCode(), stdout.String()
		}
		t.Fatalf("run %s: %v", bin, err)
		return 0, ""
	}
}

func env(cmd, nsPath string) map[string]string {
	return map[string]string{
		"CNI_COMMAND":     cmd,
		"CNI_CONTAINERID": "ctr1",
		"CNI_NETNS":       nsPath,
		"CNI_IFNAME":      "eth0", // ignored: always lo
		"CNI_PATH":        "/opt/cni/bin",
	}
}

func conf(version string) string {
	return fmt.Sprintf(`{"cniVersion":%q,"name":"lo","type":"loopback"}`, version)
}

func TestLoopbackInProcess(t *testing.T) {
	testutil.RequireRoot(t)
	testLifecycle(t, inProcess)
}

func TestLoopbackBinary(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.BuildBinary(t, "./plugins/loopback", t.TempDir())
	run := execBinary(bin)
	testLifecycle(t, run)

	t.Run("VERSION", func(t *testing.T) {
		status, out := run(t, map[string]string{"CNI_COMMAND": "VERSION"}, `{"cniVersion":"1.1.0"}`)
		var vi cni.VersionInfo
		if status != 0 || json.Unmarshal([]byte(out), &vi) != nil {
			t.Fatalf("status %d, stdout %q", status, out)
		}
		if vi.CNIVersion != cni.CurrentVersion || !slices.Equal(vi.SupportedVersions, cni.SupportedVersions) {
			t.Fatalf("version info %+v", vi)
		}
	})
}

func testLifecycle(t *testing.T, run invoke) {
	for _, v := range cni.SupportedVersions {
		t.Run("ADD at "+v, func(t *testing.T) {
			_, path := testutil.NewNetNS(t)
			if loUp(t, path) {
				t.Fatal("lo is up in a new namespace")
			}
			status, out := run(t, env("ADD", path), conf(v))
			if status != 0 {
				t.Fatalf("ADD: status %d, stdout %s", status, out)
			}
			if !loUp(t, path) {
				t.Fatal("lo is not up after ADD")
			}
			r, err := cni.ParseResult([]byte(out))
			if err != nil {
				t.Fatalf("result %s: %v", out, err)
			}
			if r.CNIVersion != v || len(r.Interfaces) != 1 || r.Interfaces[0].Name != "lo" || r.Interfaces[0].Sandbox != path || r.Interfaces[0].Mac != "00:00:00:00:00:00" {
				t.Fatalf("result %s", out)
			}
			var ips []string
			for _, ip := range r.IPs {
				ips = append(ips, ip.Address.String())
			}
			if !slices.Contains(ips, "127.0.0.1/8") {
				t.Errorf("ips %v lack 127.0.0.1/8", ips)
			}
			if !slices.Contains(ips, "::1/128") {
				t.Logf("ips %v lack ::1/128 (IPv6 may be disabled here)", ips)
			}
		})
	}

	t.Run("lifecycle", func(t *testing.T) {
		name, path := testutil.NewNetNS(t)
		steps := []struct {
			cmd        string
			wantStatus int
			wantUp     bool
		}{
			{"ADD", 0, true},
			{"CHECK", 0, true},
			{"ADD", 0, true}, // idempotent
			{"DEL", 0, false},
			{"CHECK", 1, false}, // lo is down
			{"DEL", 0, false},   // again
		}
		for i, s := range steps {
			status, out := run(t, env(s.cmd, path), conf("1.1.0"))
			if status != s.wantStatus {
				t.Fatalf("step %d %s: status %d, want %d; stdout %s", i, s.cmd, status, s.wantStatus, out)
			}
			if s.wantStatus == 0 && s.cmd != "ADD" && out != "" {
				t.Errorf("step %d %s printed %q", i, s.cmd, out)
			}
			if up := loUp(t, path); up != s.wantUp {
				t.Fatalf("step %d %s: lo up = %v, want %v", i, s.cmd, up, s.wantUp)
			}
		}
		if err := netns.DeleteNamed(name); err != nil {
			t.Fatal(err)
		}
		if status, out := run(t, env("DEL", path), conf("1.1.0")); status != 0 {
			t.Fatalf("DEL after the namespace is gone: status %d, stdout %s", status, out)
		}
		if status, out := run(t, env("CHECK", path), conf("1.1.0")); status != 1 || !strings.Contains(out, `"code":3`) {
			t.Fatalf("CHECK after the namespace is gone: status %d, stdout %s; want code 3", status, out)
		}
		e := env("DEL", "")
		if status, out := run(t, e, conf("1.1.0")); status != 0 {
			t.Fatalf("DEL without CNI_NETNS: status %d, stdout %s", status, out)
		}
	})

	t.Run("ADD passes prevResult on", func(t *testing.T) {
		_, path := testutil.NewNetNS(t)
		stdin := `{"cniVersion":"1.0.0","name":"lo","type":"loopback","prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"` + path + `"}],"ips":[{"interface":0,"address":"10.0.0.2/24"}]}}`
		status, out := run(t, env("ADD", path), stdin)
		if status != 0 {
			t.Fatalf("status %d, stdout %s", status, out)
		}
		r, err := cni.ParseResult([]byte(out))
		if err != nil || len(r.Interfaces) != 1 || r.Interfaces[0].Name != "eth0" || r.IPs[0].Address.String() != "10.0.0.2/24" {
			t.Fatalf("result %s (%v), want the prevResult", out, err)
		}
		if !loUp(t, path) {
			t.Fatal("lo not up")
		}
	})

	t.Run("STATUS and GC", func(t *testing.T) {
		for _, cmd := range []string{"STATUS", "GC"} {
			status, out := run(t, map[string]string{"CNI_COMMAND": cmd, "CNI_PATH": "/opt/cni/bin"}, conf("1.1.0"))
			if status != 0 || out != "" {
				t.Errorf("%s: status %d, stdout %q", cmd, status, out)
			}
		}
	})

	t.Run("refuses the host namespace", func(t *testing.T) {
		status, out := run(t, env("ADD", "/proc/self/ns/net"), conf("1.1.0"))
		if status != 1 || !strings.Contains(out, `"code":4`) {
			t.Fatalf("status %d, stdout %s", status, out)
		}
	})
}
