package main

import (
	"testing"

	"github.com/podnet/podnet/netplugin"
)

func TestParsePortMapping(t *testing.T) {
	tests := []struct {
		in   string
		want netplugin.PortMapping
		bad  bool
	}{
		{in: "8080:80", want: netplugin.PortMapping{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}},
		{in: "53:53/udp", want: netplugin.PortMapping{HostPort: 53, ContainerPort: 53, Protocol: "udp"}},
		{in: "127.0.0.1:8080:80/TCP", want: netplugin.PortMapping{HostPort: 8080, ContainerPort: 80, Protocol: "tcp", HostIP: "127.0.0.1"}},
		{in: "[::1]:8080:80", want: netplugin.PortMapping{HostPort: 8080, ContainerPort: 80, Protocol: "tcp", HostIP: "::1"}},
		{in: "80", bad: true},
		{in: "0:80", bad: true},
		{in: "8080:70000", bad: true},
		{in: "8080:80/icmp", bad: true},
		{in: "x:80", bad: true},
	}
	for _, tc := range tests {
		got, err := parsePortMapping(tc.in)
		if (err != nil) != tc.bad || (!tc.bad && got != tc.want) {
			t.Errorf("parsePortMapping(%q) = %+v, %v", tc.in, got, err)
		}
	}
}
