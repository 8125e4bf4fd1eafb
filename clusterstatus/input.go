package clusterstatus

import (
	"github.com/podnet/podnet/agent/agentstatus"
)

// Input is what the CLI read of the cluster.
type Input struct {
	// Namespace and Selector found the agents (for the words of a
	// report without any).
	Namespace, Selector string
	Nodes               []Node
	Agents              []Agent
	Control             Control
}

// Node is one Node object.
type Node struct {
	Name string
	// Ready is the kubelet's Ready condition; NotReadyReason its reason
	// and message when it is not.
	Ready          bool
	NotReadyReason string
	PodCIDRs       []string
}

// Agent is one pod of the agent DaemonSet and what its /status said.
type Agent struct {
	Pod, Node string
	// Phase is the pod's phase; Ready its Ready condition; Deleting
	// that it has a deletion timestamp.
	Phase    string
	Ready    bool
	Deleting bool
	// Container is the agent container's state in words ("waiting:
	// CrashLoopBackOff", "running"), LastTermination its last
	// termination ("Error, exit code 1"), Restarts its restart count.
	Container, LastTermination string
	Restarts                   int32
	// Unschedulable is the scheduler's reason, for a pending pod.
	Unschedulable string
	// Status is the agent's document; StatusError why there is none.
	Status      *agentstatus.Document
	StatusError string
}

// Control is what the API holds of podnet's control objects.
type Control struct {
	// IPAMCRDs are the podnet.io resources the API server serves
	// (ippools, ipamblocks, ipamnodes); ClusterNetworkPolicyCRD whether
	// it serves policy.networking.k8s.io/v1beta1 clusternetworkpolicies.
	IPAMCRDs                []string
	ClusterNetworkPolicyCRD bool
	// Pools and Blocks, when the podnet.io resources are served and
	// could be listed; Error what stopped the listing.
	Pools  []Pool
	Blocks []Block
	Error  string
}

// Pool is one IPPool.
type Pool struct {
	Name, CIDR   string
	BlockSize    int
	NodeSelector string
	Disabled     bool
}

// Block is one IPAMBlock: its name and the node it is affine to
// (empty: none), from its metadata.
type Block struct {
	Name, Node string
}
