package cni

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
)

// Result is the outcome of ADD in any supported specification version. One
// in-memory shape serves every version: what differs between versions is
// only how it is written (MarshalJSON) and which fields a version may carry
// (ConvertTo drops the rest).
type Result struct {
	CNIVersion string       `json:"cniVersion"`
	Interfaces []*Interface `json:"interfaces,omitempty"`
	IPs        []*IPConfig  `json:"ips,omitempty"`
	Routes     []*Route     `json:"routes,omitempty"`
	DNS        DNS          `json:"dns,omitzero"`
}

// Interface is an entry of a result's interfaces list. Mtu, SocketPath and
// PciID exist from 1.1.0 on.
type Interface struct {
	Name       string `json:"name"`
	Mac        string `json:"mac,omitempty"`
	Mtu        int    `json:"mtu,omitempty"`
	Sandbox    string `json:"sandbox,omitempty"`
	SocketPath string `json:"socketPath,omitempty"`
	PciID      string `json:"pciID,omitempty"`
}

// IPConfig is an address a plugin assigned. Address keeps the host bits
// ("10.1.0.5/16"), as the specification writes it.
type IPConfig struct {
	Interface *int         `json:"interface,omitempty"`
	Address   netip.Prefix `json:"address"`
	Gateway   netip.Addr   `json:"gateway,omitzero"`
}

// Route is an entry of a result's routes list. MTU, AdvMSS, Priority, Table
// and Scope exist from 1.1.0 on.
type Route struct {
	Dst      netip.Prefix `json:"dst"`
	GW       netip.Addr   `json:"gw,omitzero"`
	MTU      int          `json:"mtu,omitempty"`
	AdvMSS   int          `json:"advmss,omitempty"`
	Priority int          `json:"priority,omitempty"`
	Table    *int         `json:"table,omitempty"`
	Scope    *int         `json:"scope,omitempty"`
}

// DNS is the dns section of a result or a network configuration.
type DNS struct {
	Nameservers []string `json:"nameservers,omitempty"`
	Domain      string   `json:"domain,omitempty"`
	Search      []string `json:"search,omitempty"`
	Options     []string `json:"options,omitempty"`
}

// IsZero lets omitzero leave out an empty dns section.
func (d DNS) IsZero() bool {
	return len(d.Nameservers) == 0 && d.Domain == "" && len(d.Search) == 0 && len(d.Options) == 0
}

// ipConfigV0 is IPConfig as versions 0.3.0-0.4.0 write it: with the
// address family in "version".
type ipConfigV0 struct {
	Version   string       `json:"version"`
	Interface *int         `json:"interface,omitempty"`
	Address   netip.Prefix `json:"address"`
	Gateway   netip.Addr   `json:"gateway,omitzero"`
}

// MarshalJSON writes the result in the layout of r.CNIVersion.
func (r *Result) MarshalJSON() ([]byte, error) {
	type plain Result // no MarshalJSON: avoids recursion
	if AtLeast(r.CNIVersion, "1.0.0") {
		return json.Marshal((*plain)(r))
	}
	ips := make([]ipConfigV0, len(r.IPs))
	for i, ip := range r.IPs {
		ips[i] = ipConfigV0{Version: ipFamily(ip.Address.Addr()), Interface: ip.Interface, Address: ip.Address, Gateway: ip.Gateway}
	}
	return json.Marshal(struct {
		*plain
		IPs []ipConfigV0 `json:"ips,omitempty"`
	}{(*plain)(r), ips})
}

func ipFamily(a netip.Addr) string {
	if a.Is4() {
		return "4"
	}
	return "6"
}

// ParseResult decodes a plugin's result. It rejects what is not a result
// of a supported version: null, empty or non-object output, an unknown
// version, addresses that do not parse, interface indexes out of range.
func ParseResult(data []byte) (*Result, error) { return parseResult(data, "") }

// parseResult is ParseResult, with fallback as the version of a result
// that names none (an error when fallback is empty).
func parseResult(data []byte, fallback string) (*Result, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, Errorf(CodeDecodingFailure, "result is empty")
	}
	if data[0] != '{' {
		return nil, Errorf(CodeDecodingFailure, "result is not a JSON object: %s", abbreviate(data))
	}
	var probe struct {
		CNIVersion string `json:"cniVersion"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, Errorf(CodeDecodingFailure, "result is not valid JSON: %v", err)
	}
	if probe.CNIVersion == "" && fallback == "" {
		return nil, Errorf(CodeDecodingFailure, "result has no cniVersion: %s", abbreviate(data))
	}
	if probe.CNIVersion == "" {
		probe.CNIVersion = fallback
	}
	if err := CheckVersion(probe.CNIVersion); err != nil {
		return nil, err
	}
	var r Result
	if AtLeast(probe.CNIVersion, "1.0.0") {
		type plain Result
		if err := json.Unmarshal(data, (*plain)(&r)); err != nil {
			return nil, Errorf(CodeDecodingFailure, "cannot decode %s result: %v", probe.CNIVersion, err)
		}
	} else {
		var p struct {
			CNIVersion string       `json:"cniVersion"`
			Interfaces []*Interface `json:"interfaces,omitempty"`
			IPs        []ipConfigV0 `json:"ips,omitempty"`
			Routes     []*Route     `json:"routes,omitempty"`
			DNS        DNS          `json:"dns,omitzero"`
		}
		if err := json.Unmarshal(data, &p); err != nil {
			return nil, Errorf(CodeDecodingFailure, "cannot decode %s result: %v", probe.CNIVersion, err)
		}
		r = Result{CNIVersion: probe.CNIVersion, Interfaces: p.Interfaces, Routes: p.Routes, DNS: p.DNS}
		for i, ip := range p.IPs {
			if ip.Version != "" && ip.Address.IsValid() && ip.Version != ipFamily(ip.Address.Addr()) {
				return nil, Errorf(CodeDecodingFailure, "result ips[%d]: version %q does not match address %s", i, ip.Version, ip.Address)
			}
			r.IPs = append(r.IPs, &IPConfig{Interface: ip.Interface, Address: ip.Address, Gateway: ip.Gateway})
		}
	}
	r.CNIVersion = probe.CNIVersion
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// Validate checks the internal consistency of a result.
func (r *Result) Validate() error {
	for i, iface := range r.Interfaces {
		if iface == nil {
			return Errorf(CodeDecodingFailure, "result interfaces[%d] is null", i)
		}
	}
	for i, ip := range r.IPs {
		if ip == nil {
			return Errorf(CodeDecodingFailure, "result ips[%d] is null", i)
		}
		if !ip.Address.IsValid() {
			return Errorf(CodeDecodingFailure, "result ips[%d] has no address", i)
		}
		if ip.Gateway.IsValid() && ip.Gateway.Is4() != ip.Address.Addr().Is4() {
			return Errorf(CodeDecodingFailure, "result ips[%d]: gateway %s is not of the family of %s", i, ip.Gateway, ip.Address)
		}
		if ip.Interface != nil && (*ip.Interface < 0 || *ip.Interface >= len(r.Interfaces)) {
			return Errorf(CodeDecodingFailure, "result ips[%d]: interface index %d is out of range (%d interfaces)", i, *ip.Interface, len(r.Interfaces))
		}
	}
	for i, rt := range r.Routes {
		if rt == nil {
			return Errorf(CodeDecodingFailure, "result routes[%d] is null", i)
		}
		if !rt.Dst.IsValid() {
			return Errorf(CodeDecodingFailure, "result routes[%d] has no dst", i)
		}
	}
	return nil
}

// ConvertTo returns a copy of r written as version v. Fields that v does
// not define are dropped; everything else carries over unchanged, which is
// what the specification asks of conversions between 0.3.0 and 1.1.0.
func (r *Result) ConvertTo(v string) (*Result, error) {
	if err := CheckVersion(v); err != nil {
		return nil, err
	}
	out := r.Clone()
	out.CNIVersion = v
	if !AtLeast(v, "1.1.0") {
		for _, iface := range out.Interfaces {
			if iface == nil {
				continue
			}
			iface.Mtu, iface.SocketPath, iface.PciID = 0, "", ""
		}
		for _, rt := range out.Routes {
			if rt == nil {
				continue
			}
			rt.MTU, rt.AdvMSS, rt.Priority, rt.Table, rt.Scope = 0, 0, 0, nil, nil
		}
	}
	return out, nil
}

// Clone returns a deep copy of r.
func (r *Result) Clone() *Result {
	if r == nil {
		return nil
	}
	out := &Result{CNIVersion: r.CNIVersion, DNS: r.DNS.clone()}
	for _, iface := range r.Interfaces {
		if iface == nil {
			out.Interfaces = append(out.Interfaces, nil)
			continue
		}
		c := *iface
		out.Interfaces = append(out.Interfaces, &c)
	}
	for _, ip := range r.IPs {
		if ip == nil {
			out.IPs = append(out.IPs, nil)
			continue
		}
		c := *ip
		c.Interface = cloneInt(ip.Interface)
		out.IPs = append(out.IPs, &c)
	}
	for _, rt := range r.Routes {
		if rt == nil {
			out.Routes = append(out.Routes, nil)
			continue
		}
		c := *rt
		c.Table, c.Scope = cloneInt(rt.Table), cloneInt(rt.Scope)
		out.Routes = append(out.Routes, &c)
	}
	return out
}

func (d DNS) clone() DNS {
	return DNS{
		Nameservers: append([]string(nil), d.Nameservers...),
		Domain:      d.Domain,
		Search:      append([]string(nil), d.Search...),
		Options:     append([]string(nil), d.Options...),
	}
}

func cloneInt(p *int) *int {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// Bytes is the result's JSON in its own version's layout.
func (r *Result) Bytes() []byte {
	b, err := json.Marshal(r)
	if err != nil {
		// Every field is a plain value or a netip type; marshalling cannot
		// fail unless the result was corrupted in memory.
		panic(fmt.Sprintf("cni: marshal result: %v", err))
	}
	return b
}

// IntPtr is a convenience for the optional integer fields of results.
func IntPtr(v int) *int { return &v }

// abbreviate keeps error messages short when a plugin prints a lot.
func abbreviate(b []byte) string {
	const max = 120
	if len(b) > max {
		return fmt.Sprintf("%q...", b[:max])
	}
	return fmt.Sprintf("%q", b)
}
