package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/podnet/podnet/agent/route"
	"github.com/podnet/podnet/cni"
)

// ConfigError is a setting the agent cannot use, named as the operator
// wrote it: the ConfigMap key (deploy/kubernetes), the value, and what
// would do.
type ConfigError struct {
	Key, Value, Want string
}

func (e *ConfigError) Error() string { return fmt.Sprintf("%s %q: %s", e.Key, e.Value, e.Want) }

// Settings are the agent's values that come from the cluster's
// ConfigMap (deploy/kubernetes: routing_mode, cluster_cidr, encryption
// and the mounted conflist), checked before anything is opened, so that a bad
// edit of the ConfigMap leaves the node's data path as it is (Degraded)
// instead of sending the agent into a crash loop.
type Settings struct {
	RoutingMode  string   // routing_mode (--mode)
	ClusterCIDRs []string // cluster_cidr (--cluster-cidr)
	// Encryption is encryption (--encryption): none, wireguard, or empty
	// (none: a ConfigMap from before the key has none).
	Encryption string
	// NetworkConfig is the conflist to install (--network-config; its
	// ConfigMap key is its file name); empty: none given.
	NetworkConfig string
}

// Check returns every setting that cannot be used, each a *ConfigError;
// none: nil.
func (s Settings) Check() []error {
	var errs []error
	if _, err := route.ParseMode(s.RoutingMode); err != nil {
		errs = append(errs, &ConfigError{Key: "routing_mode", Value: s.RoutingMode, Want: "want host-gw, vxlan or auto"})
	}
	switch s.Encryption {
	case "", EncryptionNone, EncryptionWireGuard:
	default:
		errs = append(errs, &ConfigError{Key: "encryption", Value: s.Encryption, Want: "want " + EncryptionNone + " or " + EncryptionWireGuard})
	}
	for _, c := range s.ClusterCIDRs {
		p, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil || p != p.Masked() {
			errs = append(errs, &ConfigError{Key: "cluster_cidr", Value: c, Want: "want network prefixes such as 10.244.0.0/16, comma-separated"})
		}
	}
	if s.NetworkConfig != "" {
		if err := checkConflist(s.NetworkConfig); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// checkConflist reads the conflist to install: JSON, a network
// configuration list, and podnet's (a plugin of type podnet).
func checkConflist(path string) error {
	bad := func(format string, args ...any) error {
		return &ConfigError{Key: filepath.Base(path), Value: path, Want: fmt.Sprintf(format, args...)}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return bad("cannot be read: %v", err)
	}
	if !json.Valid(b) {
		var v any
		return bad("not valid JSON: %v", json.Unmarshal(b, &v))
	}
	list, err := cni.ParseNetworkConfigList(b, path)
	if err != nil {
		return bad("not a CNI network configuration list: %v", err)
	}
	for _, p := range list.Plugins {
		if p.Type == "podnet" {
			return nil
		}
	}
	return bad("not a podnet conflist: no plugin of type podnet")
}

// IsConfigError reports whether err is, or wraps, a *ConfigError.
func IsConfigError(err error) bool {
	var c *ConfigError
	return errors.As(err, &c)
}
