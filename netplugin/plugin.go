package netplugin

import (
	"context"
	"net/netip"
)

// Plugin names, as kubelet's --network-plugin flag spells them.
const (
	CNIPluginName     = "cni"
	KubenetPluginName = "kubenet"
)

// Defaults for a node that configures nothing.
const (
	DefaultConfDir       = "/etc/cni/net.d"
	DefaultBinDir        = "/opt/cni/bin"
	DefaultInterfaceName = "eth0"
)

// EventPodCIDRChange tells a plugin the node's pod CIDR; details carry it
// under PodCIDRKey.
const (
	EventPodCIDRChange = "pod-cidr-change"
	PodCIDRKey         = "pod-cidr"
)

// Host is what a plugin needs from the runtime that embeds it.
type Host interface {
	// NetNSPath returns the network namespace path of a pod sandbox.
	NetNSPath(sandboxID string) (string, error)
}

// HostFunc adapts a function to Host.
type HostFunc func(sandboxID string) (string, error)

// NetNSPath implements Host.
func (f HostFunc) NetNSPath(id string) (string, error) { return f(id) }

// InitConfig is what Init receives. Kubelet's Init also took a hairpin
// mode and a non-masquerade CIDR; here hairpin is always on for kubenet and
// masquerading is the network config's business.
type InitConfig struct {
	Host Host
	MTU  int // kubenet's interface MTU; 0 lets the plugin choose
}

// PodRef names a pod.
type PodRef struct {
	Namespace string
	Name      string
	UID       string // optional; passed to plugins as K8S_POD_UID when set
}

// String is kubelet's "<name>_<namespace>" form used in messages.
func (p PodRef) String() string { return p.Name + "_" + p.Namespace }

// PortMapping is one entry of the portMappings capability.
type PortMapping struct {
	HostPort      int    `json:"hostPort"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol"`
	HostIP        string `json:"hostIP,omitempty"`
}

// Bandwidth is the bandwidth capability, in bits per second.
type Bandwidth struct {
	IngressRate  int64 `json:"ingressRate,omitempty"`
	IngressBurst int64 `json:"ingressBurst,omitempty"`
	EgressRate   int64 `json:"egressRate,omitempty"`
	EgressBurst  int64 `json:"egressBurst,omitempty"`
}

// DNSConfig is the dns capability.
type DNSConfig struct {
	Servers  []string `json:"servers,omitempty"`
	Searches []string `json:"searches,omitempty"`
	Options  []string `json:"options,omitempty"`
}

// PodOptions are the pod's wishes that reach plugins as capability args.
type PodOptions struct {
	PortMappings []PortMapping
	Bandwidth    *Bandwidth
	DNS          *DNSConfig
	Annotations  map[string]string
}

// PodNetworkStatus is what the runtime reports about a pod's network.
type PodNetworkStatus struct {
	// IP is the primary address; IPs has every address, primary first.
	IP  netip.Addr
	IPs []netip.Addr
	// Interface is the pod's interface name, Network the network's name.
	Interface string
	Network   string
}

// Capability is a NET_PLUGIN_CAPABILITY_* value.
type Capability int

// CapabilityShaping says the plugin does traffic shaping itself.
const CapabilityShaping Capability = 1

// NetworkPlugin is the kubelet's network plugin interface, with a context
// on every call that does work and SetUpPod returning the pod's status.
type NetworkPlugin interface {
	// Init is called once, before anything else.
	Init(cfg InitConfig) error
	// Event delivers node events such as EventPodCIDRChange.
	Event(name string, details map[string]any)
	Name() string
	Capabilities() []Capability
	SetUpPod(ctx context.Context, pod PodRef, sandboxID string, opts *PodOptions) (*PodNetworkStatus, error)
	TearDownPod(ctx context.Context, pod PodRef, sandboxID string) error
	GetPodNetworkStatus(ctx context.Context, pod PodRef, sandboxID string) (*PodNetworkStatus, error)
	// Status is nil when the plugin can set up pods; otherwise its error
	// says what is missing.
	Status() error
	// Close stops background work (config watching). The plugin must not
	// be used afterwards.
	Close() error
}

// GarbageCollector is implemented by plugins that can release the
// attachments of sandboxes that no longer exist.
type GarbageCollector interface {
	GC(ctx context.Context, validSandboxIDs []string) error
}
