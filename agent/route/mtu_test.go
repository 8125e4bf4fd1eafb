package route

import (
	"net/netip"
	"strings"
	"testing"
)

func TestPodMTU(t *testing.T) {
	tests := []struct {
		mode      Mode
		underlay  int
		underlay6 bool
		want      int
		err       string
	}{
		{ModeVXLAN, 1500, false, 1450, ""},
		{ModeVXLAN, 1500, true, 1430, ""},
		{ModeAuto, 1500, false, 1450, ""},
		{ModeAuto, 1500, true, 1430, ""},
		{ModeHostGW, 1500, false, 1500, ""},
		{ModeHostGW, 1500, true, 1500, ""},
		// Jumbo frames are used in full.
		{ModeVXLAN, 9000, false, 8950, ""},
		{ModeAuto, 9000, false, 8950, ""},
		{ModeVXLAN, 9000, true, 8930, ""},
		{ModeHostGW, 9000, false, 9000, ""},
		// A cloud's smaller MTU (GCE's 1460) and a tunnel's (1420).
		{ModeVXLAN, 1460, false, 1410, ""},
		{ModeHostGW, 1420, false, 1420, ""},
		// The largest IP packet, whatever the link offers (lo's 65536).
		{ModeHostGW, 65536, false, 65535, ""},
		{ModeVXLAN, 65536, false, 65486, ""},
		// The smallest that leave IPv4's minimum of 68, and one less.
		{ModeVXLAN, 118, false, 68, ""},
		{ModeVXLAN, 117, false, 0, "underlay MTU 117: 67 bytes left for pods after 50 of encapsulation (mode vxlan)"},
		{ModeVXLAN, 137, true, 0, "underlay MTU 137: 67 bytes left for pods after 70"},
		{ModeHostGW, 0, false, 0, "underlay MTU 0"},
	}
	for _, tt := range tests {
		got, err := PodMTU(tt.mode, tt.underlay, tt.underlay6)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("PodMTU(%s, %d, ipv6 %v): %d, %v; want an error containing %q", tt.mode, tt.underlay, tt.underlay6, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("PodMTU(%s, %d, ipv6 %v): %d, %v; want %d", tt.mode, tt.underlay, tt.underlay6, got, err, tt.want)
		}
	}
}

// The VXLAN device and the pods agree: a pod's full-sized packet fits
// the device.
func TestVXLANDeviceMTUIsPodMTU(t *testing.T) {
	for _, underlay := range []netip.Addr{netip.MustParseAddr("198.18.0.10"), netip.MustParseAddr("fd00:198:18::10")} {
		for _, mtu := range []int{1500, 9000} {
			p := &Programmer{UnderlayAddr: underlay, UnderlayMTU: mtu}
			pod, err := PodMTU(ModeVXLAN, mtu, underlay.Is6())
			if err != nil {
				t.Fatal(err)
			}
			if dev := p.vxlanWant().MTU; dev != pod {
				t.Errorf("underlay %s MTU %d: %s MTU %d, pods %d", underlay, mtu, VXLANDevice, dev, pod)
			}
		}
	}
}

func TestEncryptedPodMTU(t *testing.T) {
	for _, tt := range []struct {
		mode      Mode
		underlay  int
		underlay6 bool
		want      int
	}{
		{ModeHostGW, 1500, false, 1440},
		{ModeHostGW, 1500, true, 1420},
		{ModeVXLAN, 1500, false, 1440},
		{ModeAuto, 9000, true, 8920},
	} {
		got, err := EncryptedPodMTU(tt.mode, tt.underlay, tt.underlay6)
		if err != nil || got != tt.want {
			t.Errorf("EncryptedPodMTU(%s, %d, ipv6 %v): %d, %v; want %d", tt.mode, tt.underlay, tt.underlay6, got, err, tt.want)
		}
	}
	if _, err := EncryptedPodMTU(ModeVXLAN, 120, false); err == nil {
		t.Error("EncryptedPodMTU(vxlan, 120): no error; want one (60 bytes left)")
	}
}
