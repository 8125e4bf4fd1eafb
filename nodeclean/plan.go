package nodeclean

import (
	"fmt"
	"net/netip"
	"path/filepath"

	"github.com/podnet/podnet/agent/route"
)

// Kind is what a step removes or restores.
type Kind string

// The kinds, in the order removal takes them.
const (
	KindConfig Kind = "config"   // a network config file in the conf dir
	KindPlugin Kind = "plugin"   // a plugin binary in the bin dir
	KindLink   Kind = "link"     // podnet.vxlan, podnet.wg
	KindRoute  Kind = "route"    // a route of protocol 97
	KindTable  Kind = "nftables" // an nftables table
	KindState  Kind = "state"    // an entry of the state directory
	KindRun    Kind = "run"      // an entry of the run directory (sockets, locks), podnet.wg's UAPI socket
	KindSysctl Kind = "sysctl"   // a sysctl restored to its recorded value
	KindRecord Kind = "record"   // the sysctl record itself, last
)

// Step is one thing removal does.
type Step struct {
	Kind Kind `json:"kind"`
	// Target names it: a path, a link, "inet podnet", a route, a sysctl
	// key.
	Target string `json:"target"`
	// Detail says more where there is more to say ("restore 0").
	Detail string `json:"detail,omitempty"`

	route Route
	table Table
	value string
}

func (s Step) String() string {
	if s.Detail != "" {
		return fmt.Sprintf("%s %s: %s", s.Kind, s.Target, s.Detail)
	}
	return fmt.Sprintf("%s %s", s.Kind, s.Target)
}

// Kept is something found that looks related but is not podnet's, or
// no longer holds what podnet set: removal leaves it and says why.
type Kept struct {
	Kind   Kind   `json:"kind"`
	Target string `json:"target"`
	Reason string `json:"reason"`
}

// File is a file found in the conf or bin dir, and whether it is
// podnet's (classifyConfig, classifyPlugin).
type File struct {
	Path   string
	Podnet bool
	// Reason says why a file is not podnet's, for Kept.
	Reason string
}

// Route is a route of protocol 97, with what deleting it needs.
type Route struct {
	Family   int // unix.AF_INET or AF_INET6
	Table    int
	Type     int
	Priority int
	Dst      netip.Prefix
	Desc     string // as `ip route` would say it, for the user
}

// Table is an nftables table.
type Table struct {
	Family string // inet, ip, ip6, arp, bridge, netdev
	Name   string
}

func (t Table) String() string { return t.Family + " " + t.Name }

// Sysctl is a recorded sysctl as the node has it now.
type Sysctl struct {
	Key           string
	Original, Set string // from the record
	Current       string
	Exists        bool // false when the key is gone (its interface was deleted)
}

// Found is what Survey found on the node.
type Found struct {
	Configs, Plugins []File
	Links            []string // podnet's links present
	Routes           []Route
	Tables           []Table // every table of the namespace
	// StateEntries and RunEntries are the paths of the entries of the
	// state and run directories, the sysctl record excluded.
	StateEntries, RunEntries []string
	Sysctls                  []Sysctl
	Record                   string // the sysctl record's path, when it exists
	// WireGuardSocket is podnet.wg's UAPI socket in the WireGuard
	// directory, when it is there.
	WireGuardSocket *Socket
}

// Socket is a unix socket found, and why removal must leave it (empty:
// it is podnet's and dead).
type Socket struct {
	Path, Keep string
}

// PodnetTables are podnet's nftables tables, in every family podnet
// uses.
var PodnetTables = []Table{
	{"inet", "podnet"},         // masquerade (dataplane.MasqTableName)
	{"inet", "podnet-guard"},   // source guards, routed pods (dataplane.GuardTableName)
	{"bridge", "podnet-guard"}, // source guards, bridge ports
	{"inet", "podnet-closed"},  // pods closed until admitted (dataplane.ClosedTableName)
	{"inet", "podnet-policy"},  // NetworkPolicy (policyrules.TableName)
	{"inet", "podnet-portmap"}, // host ports (portmap.TableName)
}

func isPodnetTable(t Table) bool {
	for _, p := range PodnetTables {
		if p == t {
			return true
		}
	}
	return false
}

// Plan is what removal does given f, in order, and what it leaves.
func Plan(f Found) (steps []Step, kept []Kept) {
	for _, group := range []struct {
		kind  Kind
		files []File
	}{{KindConfig, f.Configs}, {KindPlugin, f.Plugins}} {
		for _, c := range group.files {
			if c.Podnet {
				steps = append(steps, Step{Kind: group.kind, Target: c.Path})
			} else {
				kept = append(kept, Kept{Kind: group.kind, Target: c.Path, Reason: c.Reason})
			}
		}
	}
	for _, l := range f.Links {
		detail := "with its neighbours and FDB entries"
		if l == route.WireGuardDevice {
			detail = "with its peers"
		}
		steps = append(steps, Step{Kind: KindLink, Target: l, Detail: detail})
	}
	for _, r := range f.Routes {
		steps = append(steps, Step{Kind: KindRoute, Target: r.Desc, route: r})
	}
	for _, t := range f.Tables {
		if isPodnetTable(t) {
			steps = append(steps, Step{Kind: KindTable, Target: t.String(), table: t})
		}
	}
	for _, p := range f.StateEntries {
		steps = append(steps, Step{Kind: KindState, Target: p})
	}
	for _, p := range f.RunEntries {
		steps = append(steps, Step{Kind: KindRun, Target: p})
	}
	if ws := f.WireGuardSocket; ws != nil && ws.Keep != "" {
		kept = append(kept, Kept{Kind: KindRun, Target: ws.Path, Reason: ws.Keep})
	} else if ws != nil {
		steps = append(steps, Step{Kind: KindRun, Target: ws.Path, Detail: "wireguard-go's UAPI socket, left by a killed agent"})
	}
	s, k := planSysctls(f.Sysctls)
	steps, kept = append(steps, s...), append(kept, k...)
	if f.Record != "" {
		steps = append(steps, Step{Kind: KindRecord, Target: f.Record})
	}
	return steps, kept
}

// planSysctls restores each recorded setting that still holds what
// podnet set. One that is gone went with its interface; one that holds
// another value was changed by someone else since, and is theirs.
func planSysctls(list []Sysctl) (steps []Step, kept []Kept) {
	for _, s := range list {
		switch {
		case !s.Exists || s.Current == s.Original:
		case s.Current != s.Set:
			kept = append(kept, Kept{Kind: KindSysctl, Target: s.Key,
				Reason: fmt.Sprintf("is %s, not the %s podnet set (changed since; the node had %s before podnet)", s.Current, s.Set, s.Original)})
		default:
			steps = append(steps, Step{Kind: KindSysctl, Target: s.Key,
				Detail: fmt.Sprintf("restore %s (podnet set %s)", s.Original, s.Set), value: s.Original})
		}
	}
	return steps, kept
}

// Paths are the node's directories podnet writes.
type Paths struct {
	ConfDir, BinDir string // CNI's: shared with other CNIs
	// StateDir and RunDir are podnet's own: everything in them is
	// podnet's.
	StateDir, RunDir string
	// WireGuardDir is where userspace WireGuard serves its UAPI sockets,
	// shared with other WireGuard tools: only podnet.wg's socket is
	// podnet's, and the directory stays (empty: not looked at).
	WireGuardDir string
}

// Default directories on a node.
const (
	DefaultConfDir  = "/etc/cni/net.d"
	DefaultBinDir   = "/opt/cni/bin"
	DefaultStateDir = "/var/lib/podnet"
	DefaultRunDir   = "/run/podnet"
	// DefaultWireGuardDir is wireguard-go's and wg's.
	DefaultWireGuardDir = "/var/run/wireguard"
)

// DefaultPaths are the host's.
func DefaultPaths() Paths {
	return Paths{ConfDir: DefaultConfDir, BinDir: DefaultBinDir, StateDir: DefaultStateDir, RunDir: DefaultRunDir, WireGuardDir: DefaultWireGuardDir}
}

// sharedDirs are directories that hold more than podnet's: a state or
// run directory set to one of them would have removal empty it.
var sharedDirs = map[string]bool{"/": true, "/etc": true, "/opt": true, "/run": true, "/var": true, "/var/lib": true,
	"/var/run": true, "/tmp": true, "/usr": true, "/home": true, "/root": true, "/etc/cni": true, "/opt/cni": true,
	"/etc/cni/net.d": true, "/opt/cni/bin": true, "/var/lib/cni": true}

// Check refuses paths removal cannot work with safely.
func (p Paths) Check() error {
	for _, d := range []struct{ flag, path string }{{"conf-dir", p.ConfDir}, {"bin-dir", p.BinDir}, {"state-dir", p.StateDir}, {"run-dir", p.RunDir}} {
		if d.path == "" || !filepath.IsAbs(d.path) {
			return fmt.Errorf("--%s %q: want an absolute path", d.flag, d.path)
		}
	}
	if p.WireGuardDir != "" && !filepath.IsAbs(p.WireGuardDir) {
		return fmt.Errorf("--wireguard-dir %q: want an absolute path, or empty", p.WireGuardDir)
	}
	for _, d := range []struct{ flag, path string }{{"state-dir", p.StateDir}, {"run-dir", p.RunDir}} {
		if sharedDirs[filepath.Clean(d.path)] {
			return fmt.Errorf("--%s %s: not podnet's own directory (everything in it would be removed)", d.flag, d.path)
		}
	}
	return nil
}
