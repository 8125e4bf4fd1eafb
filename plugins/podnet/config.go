package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/cni/skel"
	"github.com/podnet/podnet/dataplane"
)

// Modes.
const (
	modeRouted = "routed"
	modeBridge = "bridge"
)

// defaultBridge is the bridge of bridge mode when the config names none.
const defaultBridge = "podnet0"

// conf is the plugin's configuration, validated.
type conf struct {
	*skel.NetConf
	Mode        string
	MTU         int
	Bridge      string
	Hairpin     bool
	DefaultGW   bool // bridge mode: default route via the bridge
	Promisc     bool
	IPMasq      bool
	MasqExclude []netip.Prefix
	// AllowedSources are the source prefixes any pod of the network may
	// send from besides its own addresses: the opt-in for pods that route
	// for others (docs/security.md). Empty: a pod's own addresses only.
	AllowedSources []netip.Prefix
	IPAMType       string
	// PolicySocket is the node's policy agent's handshake socket
	// (policySocket; the agent writes it with --network-policy): ADD
	// asks the agent before the pod comes up, and closes the pod when it
	// gets no answer. Empty: no handshake.
	PolicySocket string
	// ipamPools are the pools of podnet-ipam's configuration: with
	// ipMasq and no masqExclude, the destinations never masqueraded.
	ipamPools []netip.Prefix
}

// rawConf is the configuration as JSON has it. Pointers tell "absent"
// from a zero value, so a field that does not apply to the mode is an
// error only when it is actually set.
type rawConf struct {
	Mode             string   `json:"mode"`
	MTU              int      `json:"mtu"`
	Bridge           *string  `json:"bridge"`
	HairpinMode      *bool    `json:"hairpinMode"`
	IsDefaultGateway *bool    `json:"isDefaultGateway"`
	PromiscMode      *bool    `json:"promiscMode"`
	IPMasq           bool     `json:"ipMasq"`
	MasqExclude      []string `json:"masqExclude"`
	AllowedSources   []string `json:"allowedSources"`
	PolicySocket     string   `json:"policySocket"`
	IPAM             *struct {
		Type  string `json:"type"`
		Pools []struct {
			CIDR string `json:"cidr"`
		} `json:"pools"`
	} `json:"ipam"`
}

func confErr(field, format string, args ...any) error {
	return cni.Errorf(cni.CodeInvalidNetworkConfig, "config: "+field+": "+format, args...)
}

// parseConf decodes and validates the plugin's fields. Every error is
// code 7 and names the field.
func parseConf(args *skel.CmdArgs) (*conf, error) {
	var raw rawConf
	if err := json.Unmarshal(args.StdinData, &raw); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, confErr(te.Field, "must be %s, got a JSON %s", jsonKind(te.Type.Kind()), te.Value)
		}
		return nil, cni.Errorf(cni.CodeInvalidNetworkConfig, "config: %v", err)
	}
	return validate(args.NetConf, &raw)
}

func validate(nc *skel.NetConf, raw *rawConf) (*conf, error) {
	c := &conf{NetConf: nc, Mode: raw.Mode, MTU: raw.MTU, IPMasq: raw.IPMasq}
	switch c.Mode {
	case "":
		c.Mode = modeRouted
	case modeRouted, modeBridge:
	default:
		return nil, confErr("mode", "%q is not %q or %q", raw.Mode, modeRouted, modeBridge)
	}
	if c.MTU != 0 && (c.MTU < 68 || c.MTU > 65535) {
		return nil, confErr("mtu", "%d is outside 68-65535", c.MTU)
	}
	for _, set := range []func(*rawConf) error{c.setBridge, c.setMasq, c.setSources, c.setIPAM, c.setPolicySocket} {
		if err := set(raw); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// setBridge validates the fields of bridge mode, which a routed
// configuration must not set.
func (c *conf) setBridge(raw *rawConf) error {
	if c.Mode == modeRouted {
		for _, f := range []struct {
			name string
			set  bool
		}{
			{"bridge", raw.Bridge != nil},
			{"hairpinMode", raw.HairpinMode != nil},
			{"isDefaultGateway", raw.IsDefaultGateway != nil},
			{"promiscMode", raw.PromiscMode != nil},
		} {
			if f.set {
				return confErr(f.name, "applies to mode %q only, and the mode is %q", modeBridge, modeRouted)
			}
		}
		return nil
	}
	c.Bridge = defaultBridge
	if raw.Bridge != nil {
		c.Bridge = *raw.Bridge
	}
	if err := dataplane.ValidIfName(c.Bridge); err != nil {
		return confErr("bridge", "%v", err)
	}
	if strings.HasPrefix(c.Bridge, dataplane.HostVethPrefix) && dataplane.IsHostVethName(c.Bridge) {
		return confErr("bridge", "%q has the shape of podnet's host veth names", c.Bridge)
	}
	c.Hairpin = raw.HairpinMode != nil && *raw.HairpinMode
	c.Promisc = raw.PromiscMode != nil && *raw.PromiscMode
	// podnet's default, unlike the reference bridge plugin's: a pod on a
	// bridge with no default route is rarely what anyone wants.
	c.DefaultGW = raw.IsDefaultGateway == nil || *raw.IsDefaultGateway
	return nil
}

// setMasq validates masqExclude.
func (c *conf) setMasq(raw *rawConf) error {
	for i, s := range raw.MasqExclude {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return confErr(fmt.Sprintf("masqExclude[%d]", i), "%q is not a CIDR", s)
		}
		c.MasqExclude = append(c.MasqExclude, p.Masked())
	}
	if len(c.MasqExclude) > 0 && !c.IPMasq {
		return confErr("masqExclude", "is set but ipMasq is not")
	}
	return nil
}

// setSources validates allowedSources.
func (c *conf) setSources(raw *rawConf) error {
	for i, s := range raw.AllowedSources {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return confErr(fmt.Sprintf("allowedSources[%d]", i), "%q is not a CIDR", s)
		}
		c.AllowedSources = append(c.AllowedSources, p.Masked())
	}
	return nil
}

// setIPAM validates the IPAM's type and, for podnet-ipam, keeps its
// pools.
func (c *conf) setIPAM(raw *rawConf) error {
	if raw.IPAM == nil {
		return confErr("ipam", "is missing: podnet needs an IPAM plugin for the pod's addresses")
	}
	c.IPAMType = raw.IPAM.Type
	if c.IPAMType == "" {
		return confErr("ipam.type", "is missing")
	}
	if !validIPAMType(c.IPAMType) {
		return confErr("ipam.type", "%q is not a plugin name", c.IPAMType)
	}
	if c.IPAMType == "podnet-ipam" {
		// A pool that does not parse is podnet-ipam's to report, with
		// its own field name, when it allocates.
		for _, p := range raw.IPAM.Pools {
			if pfx, err := netip.ParsePrefix(p.CIDR); err == nil {
				c.ipamPools = append(c.ipamPools, pfx.Masked())
			}
		}
	}
	return nil
}

// setPolicySocket validates policySocket: an absolute path.
func (c *conf) setPolicySocket(raw *rawConf) error {
	if p := raw.PolicySocket; p != "" && !filepath.IsAbs(p) {
		return confErr("policySocket", "%q is not an absolute path", p)
	}
	c.PolicySocket = raw.PolicySocket
	return nil
}

// validIPAMType reports whether t can name a plugin binary.
func validIPAMType(t string) bool {
	return t != "" && !strings.ContainsAny(t, `/\`) && t != "." && t != ".."
}

func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.Bool:
		return "a boolean"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "a list"
	case reflect.Struct, reflect.Map, reflect.Pointer:
		return "an object"
	}
	return "a number"
}

// masqNetwork is the network's masquerade as dataplane wants it. Traffic
// between pods of the cluster is never masqueraded (Kubernetes' network
// model): the destinations excluded are masqExclude when set, else every
// pool of podnet-ipam's, else the subnets of the pods' addresses as the
// IPAM gives them (ips, which may be nil when only the rules matter) --
// but not when those are host routes, as a routed pod's /32 is: a pod's
// own address says nothing of where the other pods are, so that case
// needs masqExclude.
func (c *conf) masqNetwork(ips []podIP) (dataplane.MasqNetwork, error) {
	n := dataplane.MasqNetwork{Network: c.Name}
	switch {
	case len(c.MasqExclude) > 0:
		n.Exclude = c.MasqExclude
	case len(c.ipamPools) > 0:
		n.Exclude = c.ipamPools
	default:
		n.ExcludeAdded = true
		for _, ip := range ips {
			if ip.subnet.Bits() == ip.subnet.Addr().BitLen() {
				return n, confErr("masqExclude", "is required with ipMasq and ipam.type %q, whose result gives %s, a host route: "+
					"list the cluster's pod CIDRs, which are never masqueraded", c.IPAMType, ip.subnet)
			}
			if !slices.Contains(n.Exclude, ip.subnet) {
				n.Exclude = append(n.Exclude, ip.subnet)
			}
		}
	}
	return n, nil
}
