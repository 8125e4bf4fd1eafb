package netplugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"

	"github.com/podnet/podnet/cni"
)

// KubenetNetworkName is the name of the network kubenet builds.
const KubenetNetworkName = "kubenet"

// KubenetBridge is the bridge kubenet attaches pods to.
const KubenetBridge = "cbr0"

// Kubenet is the "kubenet" plugin: no config files, a bridge network
// built from the node's pod CIDR once it is known (bridge cbr0 with
// hairpin, the CIDR's first address as gateway, host-local IPAM). It uses
// podnet's bridge mode when the podnet plugin is installed, the reference
// bridge plugin otherwise, and chains a port-mapping plugin when one is.
type Kubenet struct {
	*attacher
	binDirs []string
	dataDir string

	mu      sync.RWMutex
	cfg     InitConfig
	podCIDR string
	network *cni.NetworkConfigList
	netErr  error
}

// NewKubenet returns kubenet over the plugins in binDirs (empty:
// DefaultBinDir). It has no network until an EventPodCIDRChange.
func NewKubenet(binDirs []string, opts ...ProbeOption) *Kubenet {
	c := newProbeConfig(opts)
	binDirs = orDefaultBinDirs(binDirs)
	k := &Kubenet{binDirs: binDirs, dataDir: c.kubenetDir}
	k.attacher = newAttacher(k, c.newRuntime(binDirs), c.loopback)
	return k
}

// Name implements NetworkPlugin.
func (k *Kubenet) Name() string { return KubenetPluginName }

// Capabilities implements NetworkPlugin.
func (k *Kubenet) Capabilities() []Capability { return []Capability{CapabilityShaping} }

// Init implements NetworkPlugin.
func (k *Kubenet) Init(cfg InitConfig) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.cfg = cfg
	return nil
}

// Close implements NetworkPlugin.
func (k *Kubenet) Close() error { return nil }

// Event implements NetworkPlugin: the pod CIDR builds the network.
func (k *Kubenet) Event(name string, details map[string]any) {
	if name != EventPodCIDRChange {
		return
	}
	cidr, _ := details[PodCIDRKey].(string)
	k.mu.Lock()
	defer k.mu.Unlock()
	if cidr == k.podCIDR && k.network != nil {
		return
	}
	k.podCIDR = cidr
	k.network, k.netErr = k.buildNetwork(cidr)
}

// Status implements NetworkPlugin: ready once the pod CIDR is known and
// the plugins the network needs are installed.
func (k *Kubenet) Status() error {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.statusLocked()
}

func (k *Kubenet) statusLocked() error {
	if k.podCIDR == "" {
		return errors.New("kubenet does not have netConfig. This is most likely due to lack of PodCIDR")
	}
	if k.netErr != nil {
		return k.netErr
	}
	var missing []string
	for _, p := range k.network.Plugins {
		for _, typ := range []string{p.Type, p.IPAMType} {
			if typ == "" {
				continue
			}
			if _, err := cni.FindInPath(typ, k.binDirs); err != nil {
				missing = append(missing, typ)
			}
		}
	}
	if !k.loInProcess {
		if _, err := cni.FindInPath("loopback", k.binDirs); err != nil {
			missing = append(missing, "loopback")
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("kubenet: required CNI plugin(s) not found in %s: %s", strings.Join(k.binDirs, ":"), strings.Join(missing, ", "))
	}
	return nil
}

// current implements networkSource. The subnet is in the network itself:
// no ipRanges.
func (k *Kubenet) current() netSnapshot {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return netSnapshot{network: k.network, host: k.cfg.Host, notReady: k.statusLocked()}
}

// buildNetwork writes kubenet's network for a pod CIDR.
func (k *Kubenet) buildNetwork(podCIDR string) (*cni.NetworkConfigList, error) {
	prefix, err := netip.ParsePrefix(podCIDR)
	if err != nil {
		return nil, fmt.Errorf("kubenet: pod CIDR %q: %v", podCIDR, err)
	}
	prefix = prefix.Masked()
	if prefix.Addr().Is4() && prefix.Bits() > 30 || prefix.Bits() > 126 {
		return nil, fmt.Errorf("kubenet: pod CIDR %s is too small for a gateway and pods", prefix)
	}
	gateway := prefix.Addr().Next()
	defaultRoute := "0.0.0.0/0"
	if prefix.Addr().Is6() {
		defaultRoute = "::/0"
	}
	ipam := map[string]any{
		"type":    "host-local",
		"ranges":  [][]map[string]string{{{"subnet": prefix.String(), "gateway": gateway.String()}}},
		"routes":  []map[string]string{{"dst": defaultRoute}},
		"dataDir": filepath.Join(k.dataDir, "ipam"),
	}
	main := map[string]any{
		"bridge":           KubenetBridge,
		"isDefaultGateway": true,
		"hairpinMode":      true, // a pod can reach itself through a service
		"ipam":             ipam,
	}
	if k.cfg.MTU > 0 {
		main["mtu"] = k.cfg.MTU
	}
	if _, err := cni.FindInPath("podnet", k.binDirs); err == nil {
		main["type"], main["mode"] = "podnet", "bridge"
	} else {
		// The reference plugin needs to be told to hold the gateway.
		main["type"], main["isGateway"] = "bridge", true
	}
	plugins := []any{main}
	for _, pm := range []string{"podnet-portmap", "portmap"} {
		if _, err := cni.FindInPath(pm, k.binDirs); err == nil {
			plugins = append(plugins, map[string]any{"type": pm, "capabilities": map[string]bool{"portMappings": true}})
			break
		}
	}
	doc, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": KubenetNetworkName, "plugins": plugins})
	if err != nil {
		return nil, err
	}
	return cni.ParseNetworkConfigList(doc, "kubenet network for "+prefix.String())
}
