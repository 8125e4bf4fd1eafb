package agentstatus

import (
	"time"

	podnetversion "github.com/podnet/podnet/version"
)

// Path is where the agent serves the document.
const Path = "/status"

// Document is one agent's status. Every field is what the agent itself
// knows; a section it has nothing for (no policy service, no WireGuard)
// is nil.
type Document struct {
	Node string `json:"node"`
	// Version and Revision are the build's (Build).
	Version  string `json:"version"`
	Revision string `json:"revision,omitempty"`
	// Datastore is etcd or kubernetes; IPAM how pods get addresses:
	// node-cidr (the Node's spec.podCIDRs), blocks (podnet.io objects on
	// the API) or etcd (blocks in the datastore's etcd or bbolt).
	Datastore string `json:"datastore"`
	IPAM      string `json:"ipam"`
	// RoutingMode is the configured mode: host-gw, vxlan or auto.
	RoutingMode string     `json:"routingMode"`
	Encryption  Encryption `json:"encryption"`
	// Ready is true when every service is.
	Ready    bool      `json:"ready"`
	Services []Service `json:"services"`
	// Degraded is true when the agent's settings cannot be used: it
	// touches nothing on the node (the config service says why).
	Degraded bool    `json:"degraded,omitempty"`
	Policy   *Policy `json:"policy,omitempty"`
	// Attachments counts the pod network attachments in the node's CNI
	// result cache (loopback left out); -1 when it cannot be read.
	Attachments int `json:"attachments"`
	// Time is the agent's clock when it answered.
	Time time.Time `json:"time"`
}

// Service is one service's readiness, as /readyz reports it.
type Service struct {
	Name   string `json:"name"`
	Ready  bool   `json:"ready"`
	Reason string `json:"reason,omitempty"`
}

// Encryption of pod traffic between nodes.
type Encryption struct {
	// Mode is none or wireguard.
	Mode string `json:"mode"`
	// Implementation is kernel or userspace (wireguard-go in the agent);
	// empty while the device is not up.
	Implementation string `json:"implementation,omitempty"`
	// Peers are the peers configured on the device after the last
	// reconcile.
	Peers int `json:"peers"`
}

// Policy is the NetworkPolicy service's last successful apply.
type Policy struct {
	// LastApplied is when the rules in the kernel were last made those
	// of the caches (zero: never); AgeSeconds is how long ago, by the
	// agent's clock. The service rewrites the table every
	// ResyncSeconds, so a healthy age stays below that.
	LastApplied   time.Time `json:"lastApplied"`
	AgeSeconds    float64   `json:"ageSeconds"`
	ResyncSeconds float64   `json:"resyncSeconds"`
	// NetworkPolicies and ClusterNetworkPolicies in the cluster, as last
	// compiled; IsolatedPods of this node; Rules the allow and tier rules
	// of this node's pod chains.
	NetworkPolicies        int `json:"networkPolicies"`
	ClusterNetworkPolicies int `json:"clusterNetworkPolicies"`
	IsolatedPods           int `json:"isolatedPods"`
	Rules                  int `json:"rules"`
}

// Build is the running binary's version and VCS revision (package
// version: the release the linker stamped, else the module's).
func Build() (version, revision string) {
	in := podnetversion.Get()
	return in.Version, in.Revision
}
