package portmap

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Config is the plugin's own part of the network configuration.
type Config struct {
	// SNAT masquerades hairpin traffic (a pod reaching its own host
	// port) and traffic from 127.0.0.0/8 on the host. Default true;
	// without it neither works.
	SNAT bool
	// Mappings are runtimeConfig.portMappings, validated.
	Mappings []Mapping
	// MappingsGiven reports whether runtimeConfig carried portMappings
	// at all, even an empty list. A runtime sends DEL the capability
	// arguments of ADD, so a DEL without them says nothing about what
	// ADD published.
	MappingsGiven bool
}

// RuntimeMapping is one entry of runtimeConfig.portMappings as the
// runtime sends it (the CNI conventions' "portMappings" capability);
// Mapping is what it is once validated.
type RuntimeMapping struct {
	HostPort      int    `json:"hostPort"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol"`
	HostIP        string `json:"hostIP,omitempty"`
}

// Protocol is an IP protocol number a mapping may use.
type Protocol uint8

// The protocols a mapping may use.
const (
	TCP  Protocol = 6
	UDP  Protocol = 17
	SCTP Protocol = 132
)

func (p Protocol) String() string {
	switch p {
	case TCP:
		return "tcp"
	case UDP:
		return "udp"
	case SCTP:
		return "sctp"
	}
	return fmt.Sprintf("proto-%d", uint8(p))
}

// Mapping is a validated port mapping. HostIP is the zero Addr for "any
// address of either family"; 0.0.0.0 and :: mean any address of their
// family only.
type Mapping struct {
	Proto         Protocol
	HostIP        netip.Addr
	HostPort      uint16
	ContainerPort uint16
}

// Any reports whether the mapping is not restricted to one host address.
func (m Mapping) Any() bool { return !m.HostIP.IsValid() || m.HostIP.IsUnspecified() }

// Applies reports whether the mapping applies to the IP family of addr.
func (m Mapping) Applies(is4 bool) bool {
	return !m.HostIP.IsValid() || m.HostIP.Is4() == is4
}

func (m Mapping) String() string {
	host := "*"
	if m.HostIP.IsValid() {
		host = m.HostIP.String()
	}
	return fmt.Sprintf("%s %s:%d -> %d", m.Proto, host, m.HostPort, m.ContainerPort)
}

// ParseConfig decodes the plugin's fields from the configuration on
// stdin. Every error is of KindInvalid and names the field, or of
// KindMalformed for JSON that does not decode.
func ParseConfig(stdin []byte) (*Config, error) {
	var raw struct {
		SNAT          *bool `json:"snat"`
		RuntimeConfig struct {
			PortMappings *[]RuntimeMapping `json:"portMappings"`
		} `json:"runtimeConfig"`
	}
	if err := json.Unmarshal(stdin, &raw); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, errorf(KindInvalid, "config: %s: must not be a JSON %s", te.Field, te.Value)
		}
		return nil, errorf(KindMalformed, "config: %v", err)
	}
	c := &Config{SNAT: raw.SNAT == nil || *raw.SNAT, MappingsGiven: raw.RuntimeConfig.PortMappings != nil}
	if !c.MappingsGiven {
		return c, nil
	}
	ms, err := ValidateMappings(*raw.RuntimeConfig.PortMappings)
	if err != nil {
		return nil, err
	}
	c.Mappings = ms
	return c, nil
}

// ValidateMappings checks the runtime's mappings and converts them. A
// protocol may be given in any case and defaults to tcp. Two mappings
// with the same protocol, host address and host port are refused: they
// would send one port to two places.
func ValidateMappings(pms []RuntimeMapping) ([]Mapping, error) {
	out := make([]Mapping, 0, len(pms))
	seen := make(map[Mapping]int, len(pms))
	for i, pm := range pms {
		field := fmt.Sprintf("runtimeConfig.portMappings[%d]", i)
		bad := func(format string, args ...any) error {
			return errorf(KindInvalid, "config: %s.%s", field, fmt.Sprintf(format, args...))
		}
		var m Mapping
		if pm.HostPort <= 0 || pm.HostPort > 65535 {
			return nil, bad("hostPort: %d is not a port (1-65535)", pm.HostPort)
		}
		if pm.ContainerPort <= 0 || pm.ContainerPort > 65535 {
			return nil, bad("containerPort: %d is not a port (1-65535)", pm.ContainerPort)
		}
		m.HostPort, m.ContainerPort = uint16(pm.HostPort), uint16(pm.ContainerPort)
		switch strings.ToLower(pm.Protocol) {
		case "", "tcp":
			m.Proto = TCP
		case "udp":
			m.Proto = UDP
		case "sctp":
			m.Proto = SCTP
		default:
			return nil, bad("protocol: %q is not tcp, udp or sctp", pm.Protocol)
		}
		if pm.HostIP != "" {
			a, err := netip.ParseAddr(pm.HostIP)
			if err != nil || a.Zone() != "" {
				return nil, bad("hostIP: %q is not an IP address", pm.HostIP)
			}
			m.HostIP = a.Unmap()
		}
		key := Mapping{Proto: m.Proto, HostIP: m.HostIP, HostPort: m.HostPort}
		if j, dup := seen[key]; dup {
			return nil, bad("hostPort: %s port %d is already mapped by portMappings[%d]", m.Proto, m.HostPort, j)
		}
		seen[key] = i
		out = append(out, m)
	}
	return out, nil
}
