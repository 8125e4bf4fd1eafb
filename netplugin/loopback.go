package netplugin

import (
	"fmt"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/internal/loif"
	"github.com/podnet/podnet/netns"
)

// LoopbackMode says how a pod's lo is brought up.
type LoopbackMode string

const (
	// LoopbackPlugin execs the loopback plugin from the plugin dirs for
	// the loopback network, as kubelet does: its ADD and DEL are cached
	// like any attachment's. The default.
	LoopbackPlugin LoopbackMode = "plugin"
	// LoopbackInProcess brings lo up from this process, as containerd's
	// use_internal_loopback does: one exec fewer per pod (on a small node
	// that exec is a fifth of a pod's set-up), and no pod fails because a
	// loopback binary is missing from the plugin dirs. Nothing is cached
	// for it and tear-down has nothing to do for it: lo goes with the
	// namespace.
	LoopbackInProcess LoopbackMode = "in-process"
)

// ParseLoopbackMode checks a mode given by a user.
func ParseLoopbackMode(s string) (LoopbackMode, error) {
	switch m := LoopbackMode(s); m {
	case LoopbackPlugin, LoopbackInProcess:
		return m, nil
	}
	return "", fmt.Errorf("loopback mode %q: want %q or %q", s, LoopbackPlugin, LoopbackInProcess)
}

// WithLoopback sets how pods' lo is brought up (default LoopbackPlugin).
func WithLoopback(m LoopbackMode) ProbeOption { return func(c *probeConfig) { c.loopback = m } }

// loopbackUp sets lo up inside the namespace at netnsPath: what the
// loopback plugin's ADD does, without its exec.
func loopbackUp(netnsPath string) error {
	if err := netns.Do(netnsPath, func() error { return loif.SetUp(true) }); err != nil {
		return cni.Errorf(cni.CodeUnknownContainer, "loopback in %s: %v", netnsPath, err)
	}
	return nil
}
