package main

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/install"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

func TestInstallMTU(t *testing.T) {
	found := func(mtu int, dev string) func() (int, string, error) {
		return func() (int, string, error) { return mtu, dev, nil }
	}
	tests := []struct {
		name    string
		flagSet bool
		flag    int
		lookup  func() (int, string, error)
		want    int
		note    string // part of it; "" none
		err     string
	}{
		{"flag wins", true, 1400, found(9000, "eth0"), 1400, "", ""},
		{"flag 0: the kernel's", true, 0, found(9000, "eth0"), 0, "", ""},
		{"default route", false, 0, found(1500, "eth0"), 1500, "pod MTU 1500: that of eth0", ""},
		{"jumbo default route", false, 0, found(9000, "bond0"), 9000, "pod MTU 9000: that of bond0", ""},
		{"largest IP packet", false, 0, found(65536, "lo"), 65535, "pod MTU 65535", ""},
		{"no default route", false, 0, found(0, ""), 0, "no default route", ""},
		{"too small", false, 0, found(60, "tun0"), 0, "", "tun0 has MTU 60, below IPv4's minimum of 68: set --mtu"},
		{"lookup fails", false, 0, func() (int, string, error) { return 0, "", errors.New("netlink: boom") }, 0, "", "netlink: boom"},
	}
	for _, tt := range tests {
		mtu, note, err := installMTU(tt.flagSet, tt.flag, tt.lookup)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: %d, %v; want an error containing %q", tt.name, mtu, err, tt.err)
			}
			continue
		}
		if err != nil || mtu != tt.want || (tt.note == "") != (note == "") || !strings.Contains(note, tt.note) {
			t.Errorf("%s: %d, %q, %v; want %d and a note with %q", tt.name, mtu, note, err, tt.want, tt.note)
		}
	}
}

// TestInstallDefaultRouteMTU runs `podnet install` in a namespace of its
// own whose default route leaves by a 9000-byte link: the conflist's
// podnet plugin gets 9000 unless --mtu says otherwise.
func TestInstallDefaultRouteMTU(t *testing.T) {
	testutil.RequireRoot(t)
	podnet := testutil.BuildBinary(t, "./cmd/podnet", t.TempDir())
	src := t.TempDir()
	for _, p := range install.PluginNames {
		if err := os.WriteFile(filepath.Join(src, p), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_, host := testutil.NewNodeNetNS(t)
	var h *netlink.Handle
	if err := netns.Do(host, func() (err error) { h, err = dataplane.NewHandle(); return err }); err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	// A veth pair with both ends here stands in for the uplink.
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "up0", MTU: 9000}, PeerName: "up0p"}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"up0", "up0p"} {
		l, err := h.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	installWith := func(args ...string) (mtu any, out string) {
		t.Helper()
		conf := t.TempDir()
		cmd := exec.Command(podnet, append([]string{"install", "--src-dir", src, "--bin-dir", t.TempDir(), "--conf-dir", conf}, args...)...)
		var b strings.Builder
		cmd.Stdout, cmd.Stderr = &b, &b
		if err := netns.Do(host, cmd.Start); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("podnet install %v: %v\n%s", args, err, b.String())
		}
		raw, err := os.ReadFile(filepath.Join(conf, install.ConfFileName(install.DefaultNetworkName)))
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Plugins []map[string]any `json:"plugins"`
		}
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatal(err)
		}
		return doc.Plugins[0]["mtu"], b.String()
	}

	if mtu, out := installWith(); mtu != nil || !strings.Contains(out, "no default route") {
		t.Errorf("without a default route: mtu %v, want none\n%s", mtu, out)
	}
	_, dst, _ := net.ParseCIDR("0.0.0.0/0")
	up, err := h.LinkByName("up0")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.RouteAdd(&netlink.Route{Dst: dst, LinkIndex: up.Attrs().Index, Scope: netlink.SCOPE_LINK}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want any
	}{
		{nil, 9000.0},
		{[]string{"--mtu", "1400"}, 1400.0},
		{[]string{"--mtu", "0"}, nil},
	} {
		if mtu, out := installWith(tt.args...); mtu != tt.want {
			t.Errorf("podnet install %v: mtu %v, want %v\n%s", tt.args, mtu, tt.want, out)
		}
	}
}
