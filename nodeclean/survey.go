package nodeclean

import (
	"debug/buildinfo"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/agent/route"
	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/install"
	"github.com/podnet/podnet/internal/sysctlrecord"
)

// podnetLinks are the links podnet makes on a node (the pods' veths are
// the pods'): podnet.wg is left only by kernel WireGuard (a userspace
// device ends with its agent).
var podnetLinks = []string{route.VXLANDevice, route.WireGuardDevice}

// Survey reads what the node has of podnet, in the calling thread's
// network namespace (call it inside netns.Do for another one).
func Survey(p Paths) (Found, error) {
	var f Found
	var err error
	if f.Configs, err = surveyConfigs(p.ConfDir); err != nil {
		return f, err
	}
	if f.Plugins, err = surveyPlugins(p.BinDir); err != nil {
		return f, err
	}
	record := filepath.Join(p.StateDir, sysctlrecord.FileName)
	if f.StateEntries, err = dirEntries(p.StateDir, record); err != nil {
		return f, err
	}
	if f.RunEntries, err = dirEntries(p.RunDir, ""); err != nil {
		return f, err
	}
	if f.Sysctls, f.Record, err = surveySysctls(record); err != nil {
		return f, err
	}
	if f.WireGuardSocket, err = surveyWireGuardSocket(p.WireGuardDir); err != nil {
		return f, err
	}
	if err := surveyNet(&f); err != nil {
		return f, err
	}
	f.Tables, err = surveyTables()
	return f, err
}

// readDir lists dir; a missing one is empty.
func readDir(dir string) ([]fs.DirEntry, error) {
	es, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	return es, nil
}

func surveyConfigs(dir string) ([]File, error) {
	es, err := readDir(dir)
	if err != nil {
		return nil, err
	}
	var out []File
	for _, e := range es {
		if !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		data, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		if f, ok := classifyConfig(e.Name(), data); ok {
			f.Path = path
			out = append(out, f)
		}
	}
	return out, nil
}

func surveyPlugins(dir string) ([]File, error) {
	es, err := readDir(dir)
	if err != nil {
		return nil, err
	}
	var out []File
	for _, e := range es {
		if !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		var buildPath string
		if slices.Contains(install.PluginNames, e.Name()) && !slices.Contains(uniquePlugins, e.Name()) {
			// Not a Go binary, or no build information: not podnet's.
			if bi, err := buildinfo.ReadFile(path); err == nil {
				buildPath = bi.Path
			}
		}
		if f, ok := classifyPlugin(e.Name(), buildPath); ok {
			f.Path = path
			out = append(out, f)
		}
	}
	return out, nil
}

// dirEntries lists the paths of dir's entries but skip.
func dirEntries(dir, skip string) ([]string, error) {
	es, err := readDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range es {
		if p := filepath.Join(dir, e.Name()); p != skip {
			out = append(out, p)
		}
	}
	return out, nil
}

func surveySysctls(record string) ([]Sysctl, string, error) {
	if _, err := os.Stat(record); errors.Is(err, fs.ErrNotExist) {
		return nil, "", nil
	}
	rec, err := sysctlrecord.Load(record)
	if err != nil {
		return nil, "", err
	}
	var out []Sysctl
	for _, k := range sysctlrecord.Keys(rec) {
		e := rec[k]
		s := Sysctl{Key: k, Original: e.Original, Set: e.Set}
		cur, err := dataplane.ReadSysctl(k)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, "", err
		default:
			s.Current, s.Exists = cur, true
		}
		out = append(out, s)
	}
	return out, record, nil
}

// surveyNet finds podnet's links and its routes (protocol 97, every
// table, both families).
func surveyNet(f *Found) error {
	h, err := dataplane.NewHandle()
	if err != nil {
		return err
	}
	defer h.Close()
	for _, name := range podnetLinks {
		if _, err := h.LinkByName(name); err == nil {
			f.Links = append(f.Links, name)
		} else if !dataplane.IsNotFound(err) {
			return fmt.Errorf("find %s: %w", name, err)
		}
	}
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := h.RouteListFiltered(family, &netlink.Route{Table: unix.RT_TABLE_UNSPEC, Protocol: route.RouteProtocol},
			netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
		if family == netlink.FAMILY_V6 && errors.Is(err, unix.EAFNOSUPPORT) {
			continue
		}
		if err != nil {
			return fmt.Errorf("list routes of protocol %d: %w", route.RouteProtocol, err)
		}
		for _, r := range rs {
			dst, ok := dataplane.PrefixOf(r.Dst)
			if !ok {
				continue
			}
			f.Routes = append(f.Routes, Route{Family: family, Table: r.Table, Type: r.Type, Priority: r.Priority, Dst: dst,
				Desc: describeRoute(h, r, dst)})
		}
	}
	return nil
}

// describeRoute says r as `ip route` would, roughly.
func describeRoute(h *netlink.Handle, r netlink.Route, dst netip.Prefix) string {
	s := dst.String()
	if r.Type == unix.RTN_BLACKHOLE {
		s = "blackhole " + s
	}
	if r.Gw != nil {
		s += " via " + r.Gw.String()
	}
	if r.LinkIndex > 0 {
		if l, err := h.LinkByIndex(r.LinkIndex); err == nil {
			s += " dev " + l.Attrs().Name
		}
	}
	if r.Table != unix.RT_TABLE_MAIN {
		s += fmt.Sprintf(" table %d", r.Table)
	}
	return s + fmt.Sprintf(" proto %d", route.RouteProtocol)
}

var familyNames = map[nftables.TableFamily]string{
	nftables.TableFamilyINet: "inet", nftables.TableFamilyIPv4: "ip", nftables.TableFamilyIPv6: "ip6",
	nftables.TableFamilyARP: "arp", nftables.TableFamilyBridge: "bridge", nftables.TableFamilyNetdev: "netdev",
}

func familyOf(name string) nftables.TableFamily {
	for f, n := range familyNames {
		if n == name {
			return f
		}
	}
	return nftables.TableFamilyUnspecified
}

func surveyTables() ([]Table, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("open nftables netlink socket: %w", err)
	}
	ts, err := c.ListTablesOfFamily(nftables.TableFamilyUnspecified)
	if err != nil {
		return nil, fmt.Errorf("nftables: list tables: %w", err)
	}
	var out []Table
	for _, t := range ts {
		if n, ok := familyNames[t.Family]; ok {
			out = append(out, Table{Family: n, Name: t.Name})
		}
	}
	return out, nil
}

// surveyWireGuardSocket finds podnet.wg's UAPI socket in dir. The agent
// serves it while it runs wireguard-go, and removes it when it stops; it
// stays only when the agent was killed. One that answers is a running
// agent's, and anything else of that name is not a socket podnet made:
// both are kept.
func surveyWireGuardSocket(dir string) (*Socket, error) {
	if dir == "" {
		return nil, nil
	}
	p := filepath.Join(dir, route.WireGuardDevice+".sock")
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", p, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return &Socket{Path: p, Keep: "not a socket: not wireguard-go's"}, nil
	}
	c, err := net.DialTimeout("unix", p, time.Second)
	switch {
	case err == nil:
		c.Close()
		return &Socket{Path: p, Keep: "in use: an agent still runs podnet.wg in userspace"}, nil
	case errors.Is(err, unix.ECONNREFUSED):
		return &Socket{Path: p}, nil
	}
	return &Socket{Path: p, Keep: fmt.Sprintf("cannot tell whether it is in use: %v", err)}, nil
}
