package ipamcni

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/ipam"
)

// Config is the "ipam" object of a network configuration.
type Config struct {
	Type string `json:"type"`
	// Store is "bolt:/var/lib/podnet/ipam.db" (default),
	// "etcd://host:port[,host:port...]" ("etcds://" for TLS), or
	// "agent:/run/podnet/ipam.sock" (block IPAM on the Kubernetes API
	// through the store the node's agent serves, ipam/store/agentsock:
	// what deploy/kubernetes/blocks installs), or "kubernetes:KUBECONFIG"
	// (the API itself, through a kubeconfig in JSON: for the CLI).
	Store        string `json:"store"`
	EtcdCertFile string `json:"etcdCertFile,omitempty"`
	EtcdKeyFile  string `json:"etcdKeyFile,omitempty"`
	EtcdCAFile   string `json:"etcdCAFile,omitempty"`
	// Prefix is the store key prefix (default ipam.DefaultPrefix, /podnet/v2/).
	Prefix string `json:"prefix,omitempty"`
	// Pools are created when missing; existing pools are used as they
	// are (the store is the truth once it has them).
	Pools []PoolConfig `json:"pools"`
	// Node is this node's name in the IPAM (default: the host name).
	Node string `json:"node,omitempty"`
	// ResultPrefix is the prefix length the result carries: "host" (a /32
	// or /128, for routed pods; the default) or "pool" (the pool's own
	// length, for pods on a bridge).
	ResultPrefix     string       `json:"resultPrefix,omitempty"`
	Routes           []*cni.Route `json:"routes,omitempty"`
	StrictAffinity   bool         `json:"strictAffinity,omitempty"`
	MaxBlocksPerHost int          `json:"maxBlocksPerHost,omitempty"`
	// ReleaseDir is where a DEL that cannot reach an etcd or Kubernetes
	// store records the release for the node's agent (default
	// DefaultReleaseDir; see ReleaseRecord).
	ReleaseDir string `json:"releaseDir,omitempty"`
	// NodeLock is the file this node's plugins lock around each IPAM
	// operation on the Kubernetes API (default DefaultNodeLock).
	NodeLock string `json:"nodeLock,omitempty"`
}

// PoolConfig is a pool as the configuration writes it.
type PoolConfig struct {
	Name         string `json:"name"`
	CIDR         string `json:"cidr"`
	BlockSize    int    `json:"blockSize,omitempty"`
	NodeSelector string `json:"nodeSelector,omitempty"`
}

// DefaultStore is where a single machine keeps its addresses.
const DefaultStore = "bolt:/var/lib/podnet/ipam.db"

// netConf is the part of the network configuration podnet-ipam reads.
type netConf struct {
	Name          string          `json:"name"`
	IPAM          json.RawMessage `json:"ipam"`
	RuntimeConfig struct {
		IPs      []string `json:"ips"`
		IPRanges [][]struct {
			Subnet     string `json:"subnet"`
			RangeStart string `json:"rangeStart"`
			RangeEnd   string `json:"rangeEnd"`
		} `json:"ipRanges"`
	} `json:"runtimeConfig"`
	Args struct {
		CNI struct {
			IPs []string `json:"ips"`
		} `json:"cni"`
	} `json:"args"`
}

// Request is one invocation: the parsed config and what the runtime asked.
type Request struct {
	Network string
	Config  Config
	Pools   []ipam.Pool
	// IPs are requested addresses (runtimeConfig.ips, args.cni.ips or
	// CNI_ARGS IP=), Ranges restrict allocation (runtimeConfig.ipRanges).
	IPs    []netip.Addr
	Ranges []ipam.Range
}

func configErr(field, format string, args ...any) error {
	return cni.Errorf(cni.CodeInvalidNetworkConfig, "ipam.%s: %s", field, fmt.Sprintf(format, args...))
}

// ParseRequest reads the network configuration and CNI_ARGS pairs.
func ParseRequest(stdin []byte, argPairs [][2]string) (*Request, error) {
	var nc netConf
	if err := json.Unmarshal(stdin, &nc); err != nil {
		return nil, cni.Errorf(cni.CodeDecodingFailure, "podnet-ipam: cannot decode config: %v", err)
	}
	if len(nc.IPAM) == 0 {
		return nil, cni.Errorf(cni.CodeInvalidNetworkConfig, "podnet-ipam: config has no ipam section")
	}
	r := &Request{Network: nc.Name}
	var err error
	if r.Config, err = parseConfig(nc.IPAM); err != nil {
		return nil, err
	}
	if r.Pools, err = parsePools(r.Config.Pools); err != nil {
		return nil, err
	}
	if r.IPs, err = requestedIPs(&nc, argPairs); err != nil {
		return nil, err
	}
	if r.Ranges, err = parseRanges(&nc); err != nil {
		return nil, err
	}
	return r, nil
}

// parseConfig decodes the ipam section, refusing unknown fields, and
// fills in the defaults.
func parseConfig(raw json.RawMessage) (Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, cni.Errorf(cni.CodeInvalidNetworkConfig, "ipam: %v", err)
	}
	if c.Store == "" {
		c.Store = DefaultStore
	}
	if c.Node == "" {
		h, err := os.Hostname()
		if err != nil {
			return c, configErr("node", "not set and no host name: %v", err)
		}
		c.Node = h
	}
	switch c.ResultPrefix {
	case "":
		c.ResultPrefix = "host"
	case "host", "pool":
	default:
		return c, configErr("resultPrefix", "%q: want host or pool", c.ResultPrefix)
	}
	return c, nil
}

// parsePools turns the configured pools into IPAM pools; a pool without
// a name is named after its CIDR.
func parsePools(pcs []PoolConfig) ([]ipam.Pool, error) {
	if len(pcs) == 0 {
		return nil, configErr("pools", "at least one pool is needed")
	}
	var out []ipam.Pool
	for i, p := range pcs {
		cidr, err := netip.ParsePrefix(p.CIDR)
		if err != nil {
			return nil, configErr(fmt.Sprintf("pools[%d].cidr", i), "%q: %v", p.CIDR, err)
		}
		name := p.Name
		if name == "" {
			name = strings.NewReplacer("/", "-", ":", "-").Replace(cidr.Masked().String())
		}
		if strings.TrimSpace(p.NodeSelector) != "" {
			// The allocator would refuse the pool when seeding it: say so
			// here, naming the field (ipam.Allocator.PutPool).
			return nil, configErr(fmt.Sprintf("pools[%d].nodeSelector", i),
				"%q: podnet does not apply pool node selectors; leave it empty (a node's network config names the pools it uses)", p.NodeSelector)
		}
		pool, err := ipam.Pool{Name: name, CIDR: cidr, BlockSize: p.BlockSize, NodeSelector: p.NodeSelector}.Normalize()
		if err != nil {
			return nil, cni.Errorf(cni.CodeInvalidNetworkConfig, "ipam.pools[%d]: %v", i, err)
		}
		out = append(out, pool)
	}
	return out, nil
}

// requestedIPs are the addresses the runtime asked for: runtimeConfig.ips
// (the "ips" capability), the args convention, and CNI_ARGS IP=
// (comma-separated).
func requestedIPs(nc *netConf, argPairs [][2]string) ([]netip.Addr, error) {
	ips := append(append([]string(nil), nc.RuntimeConfig.IPs...), nc.Args.CNI.IPs...)
	for _, kv := range argPairs {
		if kv[0] == "IP" {
			ips = append(ips, strings.Split(kv[1], ",")...)
		}
	}
	var out []netip.Addr
	for _, s := range ips {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil { // "10.0.0.5/24" is accepted
			s = p.Addr().String()
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, cni.Errorf(cni.CodeInvalidNetworkConfig, "requested IP %q is not an address", s)
		}
		out = append(out, a)
	}
	return out, nil
}

// parseRanges reads runtimeConfig.ipRanges.
func parseRanges(nc *netConf) ([]ipam.Range, error) {
	var out []ipam.Range
	for i, set := range nc.RuntimeConfig.IPRanges {
		for j, rg := range set {
			r, err := parseRange(rg.Subnet, rg.RangeStart, rg.RangeEnd)
			if err != nil {
				return nil, cni.Errorf(cni.CodeInvalidNetworkConfig, "runtimeConfig.ipRanges[%d][%d].%v", i, j, err)
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// parseRange reads one ipRanges entry; its error starts with the field at
// fault.
func parseRange(subnet, start, end string) (ipam.Range, error) {
	sub, err := netip.ParsePrefix(subnet)
	if err != nil {
		return ipam.Range{}, fmt.Errorf("subnet %q: %v", subnet, err)
	}
	out := ipam.Range{Subnet: sub.Masked()}
	// A slice, not a map: with both fields bad, the error names
	// rangeStart every time.
	for _, f := range []struct {
		name string
		v    string
		dst  *netip.Addr
	}{{"rangeStart", start, &out.Start}, {"rangeEnd", end, &out.End}} {
		if f.v == "" {
			continue
		}
		a, err := netip.ParseAddr(f.v)
		if err != nil || !sub.Contains(a) {
			return ipam.Range{}, fmt.Errorf("%s %q: not an address in %s", f.name, f.v, sub)
		}
		*f.dst = a
	}
	return out, nil
}

// Handle is the IPAM handle of an attachment.
func Handle(network, containerID string) string { return network + "." + containerID }
