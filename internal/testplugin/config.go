package main

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"time"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/internal/testplugin/record"
)

// config is the plugin's configuration; see the package documentation.
type config struct {
	CNIVersion       string                `json:"cniVersion"`
	Record           string                `json:"record"`
	Result           json.RawMessage       `json:"result"`
	PrevResult       json.RawMessage       `json:"prevResult"`
	IfName           string                `json:"ifname"`
	IP               string                `json:"ip"`
	Fail             map[cni.Verb]failSpec `json:"fail"`
	Sleep            json.RawMessage       `json:"sleep"`
	Crash            verbs                 `json:"crash"`
	Garbage          verbs                 `json:"garbage"`
	Null             bool                  `json:"null"`
	SpawnChild       bool                  `json:"spawnChild"`
	ChildSleep       string                `json:"childSleep"`
	ChildHoldsOutput bool                  `json:"childHoldsOutput"`
	IgnoreTerm       bool                  `json:"ignoreTerm"`
}

type failSpec struct {
	Code    cni.Code `json:"code"`
	Msg     string   `json:"msg"`
	Details string   `json:"details"`
}

// verbs is a verb, a list of verbs, or "*".
type verbs []cni.Verb

func (v *verbs) UnmarshalJSON(b []byte) error {
	var one cni.Verb
	if err := json.Unmarshal(b, &one); err == nil {
		*v = verbs{one}
		return nil
	}
	var many []cni.Verb
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*v = many
	return nil
}

func (v verbs) has(cmd cni.Verb) bool { return slices.Contains(v, cmd) || slices.Contains(v, "*") }

// parseConfig decodes stdin. The record dir is wanted even from a
// configuration that is otherwise broken, so a partial config is
// returned together with the error.
func parseConfig(stdin []byte) (*config, *cni.Error) {
	var c config
	if len(stdin) == 0 {
		return &c, cni.Errorf(cni.CodeDecodingFailure, "testplugin: empty stdin")
	}
	if err := json.Unmarshal(stdin, &c); err != nil {
		var rec struct {
			Record string `json:"record"`
		}
		_ = json.Unmarshal(stdin, &rec)
		return &config{Record: rec.Record}, cni.Errorf(cni.CodeDecodingFailure, "testplugin: decode config: %v", err)
	}
	return &c, nil
}

func (c *config) sleepFor(cmd cni.Verb) time.Duration {
	if len(c.Sleep) == 0 {
		return 0
	}
	var s string
	if json.Unmarshal(c.Sleep, &s) != nil {
		var per map[cni.Verb]string
		_ = json.Unmarshal(c.Sleep, &per)
		s = per[cmd]
	}
	d, _ := time.ParseDuration(s)
	return d
}

// spawnChild starts a copy of this binary that only sleeps. It stays in
// the plugin's process group, as a helper a real plugin forgot would.
func spawnChild(c *config, dir string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	sleep := c.ChildSleep
	if sleep == "" {
		sleep = "60s"
	}
	child := exec.Command(exe)
	child.Env = append(os.Environ(), envChild+"="+sleep)
	if c.IgnoreTerm {
		// An ignored signal is not reliably inherited by a Go program,
		// which installs its own handlers: the child is told to ignore it.
		child.Env = append(child.Env, envChildIgnoreTerm+"=1")
	}
	if c.ChildHoldsOutput {
		child.Stdout, child.Stderr = os.Stdout, os.Stderr
	}
	var ready *os.File
	if c.IgnoreTerm {
		// The child's pid is recorded only once it ignores SIGTERM: a
		// test that signals the group as soon as it learns the pid would
		// otherwise kill a child that had not got that far.
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		defer r.Close()
		child.ExtraFiles = []*os.File{w}
		ready = r
		defer w.Close()
	}
	if err := child.Start(); err != nil {
		return err
	}
	if ready != nil {
		child.ExtraFiles[0].Close()
		if _, err := ready.Read(make([]byte, 1)); err != nil {
			return fmt.Errorf("child %d never said it ignores SIGTERM: %w", child.Process.Pid, err)
		}
	}
	if dir != "" {
		return record.WriteChildPID(dir, child.Process.Pid)
	}
	return nil
}

// defaultResult is the prevResult (or an empty result) in the config's
// version with one more interface, and an address on it if configured.
func defaultResult(c *config) (*cni.Result, error) {
	r := &cni.Result{CNIVersion: c.CNIVersion}
	if len(c.PrevResult) > 0 && string(c.PrevResult) != "null" {
		prev, err := cni.ParseResult(c.PrevResult)
		if err != nil {
			return nil, err
		}
		r = prev
	}
	r, err := r.ConvertTo(c.CNIVersion)
	if err != nil {
		return nil, err
	}
	name := c.IfName
	if name == "" {
		name = os.Getenv("CNI_IFNAME")
	}
	r.Interfaces = append(r.Interfaces, &cni.Interface{Name: name, Sandbox: os.Getenv("CNI_NETNS")})
	if c.IP != "" {
		p, err := netip.ParsePrefix(c.IP)
		if err != nil {
			return nil, cni.Errorf(cni.CodeInvalidNetworkConfig, "testplugin: ip: %v", err)
		}
		r.IPs = append(r.IPs, &cni.IPConfig{Interface: cni.IntPtr(len(r.Interfaces) - 1), Address: p})
	}
	return r, nil
}
