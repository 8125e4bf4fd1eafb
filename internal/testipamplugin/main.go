// Command testipamplugin is a small, file-backed IPAM plugin for podnet's
// tests: a realistic stand-in for host-local or podnet-ipam where the
// main module must not depend on upstream plugins. It allocates
// sequential addresses from each range in "ranges" (one address per
// range, the first host address being the gateway), keyed by container
// ID and ifname so that a repeated ADD returns the same addresses, and
// appends every verb to dataDir/log so tests can count releases.
//
//	"ipam": {"type": "testipamplugin", "dataDir": DIR,
//	         "ranges": ["10.100.0.0/24", "fd00:100::/64"],
//	         "routes": [{"dst": "192.0.2.0/24"}],
//	         "fail": {"ADD": {"code": 11, "msg": "..."}}}
//
// It is test code: it must never be installed on a real node. (The
// conformance suite for ipam.Store implementations is ipam/ipamtest,
// which has nothing to do with this plugin.)
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/cni/skel"
)

type config struct {
	IPAM struct {
		DataDir string                 `json:"dataDir"`
		Ranges  []netip.Prefix         `json:"ranges"`
		Routes  []*cni.Route           `json:"routes"`
		Fail    map[cni.Verb]cni.Error `json:"fail"`
	} `json:"ipam"`
}

// state is dataDir/state.json.
type state struct {
	Allocs map[string][]netip.Addr `json:"allocs"` // "containerID/ifname"
}

func main() {
	(&skel.Plugin{
		Add:    func(a *skel.CmdArgs) (*cni.Result, error) { return withState(a, add) },
		Del:    func(a *skel.CmdArgs) error { _, err := withState(a, del); return err },
		Check:  func(a *skel.CmdArgs) error { _, err := withState(a, check); return err },
		Status: func(a *skel.CmdArgs) error { _, err := withState(a, nil); return err },
		GC:     func(a *skel.CmdArgs) error { _, err := withState(a, gc); return err },
		About:  "podnet test IPAM",
	}).Main()
}

type op func(c *config, a *skel.CmdArgs, s *state) (*cni.Result, error)

// withState runs fn with the state locked, logs the verb, and saves.
func withState(a *skel.CmdArgs, fn op) (*cni.Result, error) {
	var c config
	if err := json.Unmarshal(a.StdinData, &c); err != nil {
		return nil, cni.Errorf(cni.CodeDecodingFailure, "testipamplugin: %v", err)
	}
	dir := c.IPAM.DataDir
	if dir == "" {
		return nil, cni.Errorf(cni.CodeInvalidNetworkConfig, "testipamplugin: ipam.dataDir is missing")
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, cni.Errorf(cni.CodeIOFailure, "testipamplugin: %v", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return nil, cni.Errorf(cni.CodeIOFailure, "testipamplugin: lock: %v", err)
	}
	logf(dir, "%s %s %s\n", a.Command, a.ContainerID, a.IfName)
	if f, ok := c.IPAM.Fail[a.Command]; ok {
		return nil, &f
	}
	if fn == nil {
		return nil, nil
	}
	s := state{Allocs: map[string][]netip.Addr{}}
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err == nil {
		err = json.Unmarshal(b, &s)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, cni.Errorf(cni.CodeIOFailure, "testipamplugin: state: %v", err)
	}
	if s.Allocs == nil {
		s.Allocs = map[string][]netip.Addr{}
	}
	res, err := fn(&c, a, &s)
	if err != nil {
		return nil, err
	}
	b, _ = json.Marshal(&s)
	tmp := filepath.Join(dir, ".state.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return nil, cni.Errorf(cni.CodeIOFailure, "testipamplugin: %v", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "state.json")); err != nil {
		return nil, cni.Errorf(cni.CodeIOFailure, "testipamplugin: %v", err)
	}
	return res, nil
}

func logf(dir, format string, args ...any) {
	f, err := os.OpenFile(filepath.Join(dir, "log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	fmt.Fprintf(f, format, args...)
	f.Close()
}

func key(a *skel.CmdArgs) string { return a.ContainerID + "/" + a.IfName }

func add(c *config, a *skel.CmdArgs, s *state) (*cni.Result, error) {
	got, ok := s.Allocs[key(a)]
	if !ok {
		used := map[netip.Addr]bool{}
		for _, l := range s.Allocs {
			for _, ip := range l {
				used[ip] = true
			}
		}
		for _, r := range c.IPAM.Ranges {
			ip := r.Masked().Addr().Next().Next() // .1 is the gateway
			for ; r.Contains(ip) && used[ip]; ip = ip.Next() {
			}
			if !r.Contains(ip) {
				return nil, cni.Errorf(cni.CodeTryAgainLater, "testipamplugin: range %s is full", r)
			}
			got = append(got, ip)
		}
		s.Allocs[key(a)] = got
	}
	res := &cni.Result{CNIVersion: cni.CurrentVersion, Routes: c.IPAM.Routes}
	for i, ip := range got {
		r := c.IPAM.Ranges[i]
		res.IPs = append(res.IPs, &cni.IPConfig{Address: netip.PrefixFrom(ip, r.Bits()), Gateway: r.Masked().Addr().Next()})
	}
	return res, nil
}

func del(c *config, a *skel.CmdArgs, s *state) (*cni.Result, error) {
	delete(s.Allocs, key(a))
	return nil, nil
}

func check(c *config, a *skel.CmdArgs, s *state) (*cni.Result, error) {
	if _, ok := s.Allocs[key(a)]; !ok {
		return nil, cni.Errorf(cni.CodeUnknownContainer, "testipamplugin: nothing allocated to %s", key(a))
	}
	return nil, nil
}

func gc(c *config, a *skel.CmdArgs, s *state) (*cni.Result, error) {
	valid := map[string]bool{}
	for _, v := range a.NetConf.ValidAttachments {
		valid[v.ContainerID+"/"+v.IfName] = true
	}
	for k := range s.Allocs {
		if !valid[k] {
			delete(s.Allocs, k)
		}
	}
	return nil, nil
}
