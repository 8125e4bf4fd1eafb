package connectivity

import "fmt"

// Phase orders the checks: every check of a phase runs at once, after
// the previous phase's policies are in place.
type Phase int

const (
	PhaseBasic         Phase = iota // no policy
	PhaseDenyIngress                // deny-ingress selects the cross-node server
	PhaseAllowIngress               // and allow-from-client beside it
	PhasePolicyRemoved              // both deleted
	PhaseDenyEgress                 // deny-egress selects the egress client
	PhaseEgressRemoved              // deleted
)

// Kind is what a probe does: an HTTP GET answered with the address the
// server saw, a UDP exchange answered the same way, a TCP connect, or a
// DNS lookup.
type Kind string

const (
	KindHTTP Kind = "http"
	KindUDP  Kind = "udp"
	KindTCP  Kind = "tcp"
	KindDNS  Kind = "dns"
)

// Target names what a check reaches; the run resolves it to an address.
type Target string

const (
	TargetServerSame  Target = "server-same-node"  // pod IP of the server on the client's node
	TargetServerCross Target = "server-cross-node" // pod IP of the server on the other node
	TargetClusterIP   Target = "clusterip"         // the Service's ClusterIP, backed by the cross-node server
	TargetNodePort    Target = "nodeport"          // the other node's address, the Service's NodePort
	TargetHostPort    Target = "hostport"          // the other node's address, the cross-node server's hostPort
	TargetDNSName     Target = "dns-name"          // the Service's name, which must resolve to its ClusterIP
	TargetNodeOwn     Target = "node-own"          // the client's node, its kubelet port
	TargetNodeOther   Target = "node-other"        // the other node, its kubelet port
)

// Client roles: the label role= of a prober pod, which the policies select.
const (
	RoleClient       = "client"
	RoleOther        = "other"
	RoleEgressClient = "egress-client"
)

// Check is one row of the report.
type Check struct {
	Name   string
	Phase  Phase
	Role   string // the prober pod's role label
	Kind   Kind
	Target Target
	// Blocked: the probe must fail (a policy denies it).
	Blocked bool
	// NoSNAT: the server must have seen the prober's own pod address.
	NoSNAT bool
	// Policy: a check of NetworkPolicy enforcement.
	Policy bool
	// HostPort: judged only where the CNI is known to map host ports.
	HostPort bool
	// NotRun says why the check does not run; empty when it runs.
	NotRun string
}

// Cluster is what the plan depends on.
type Cluster struct {
	// Nodes: 1 or more schedulable, Ready nodes were found.
	Nodes int
	// DNS: a kube-dns Service exists in kube-system.
	DNS bool
}

// Plan lists the checks for a cluster, the ones that cannot run with
// their reason.
func Plan(c Cluster) []Check {
	cross := ""
	if c.Nodes < 2 {
		cross = fmt.Sprintf("needs two schedulable Ready nodes, found %d", c.Nodes)
	}
	dns := ""
	if !c.DNS {
		dns = "no Service kube-system/kube-dns"
	}
	checks := []Check{
		{Name: "pod to pod, same node (TCP)", Kind: KindHTTP, Target: TargetServerSame, NoSNAT: true},
		{Name: "pod to pod, same node (UDP)", Kind: KindUDP, Target: TargetServerSame, NoSNAT: true},
		{Name: "pod to pod, across nodes (TCP)", Kind: KindHTTP, Target: TargetServerCross, NoSNAT: true, NotRun: cross},
		{Name: "pod to pod, across nodes (UDP)", Kind: KindUDP, Target: TargetServerCross, NoSNAT: true, NotRun: cross},
		{Name: "ClusterIP, across nodes", Kind: KindHTTP, Target: TargetClusterIP, NotRun: cross},
		{Name: "NodePort, other node", Kind: KindHTTP, Target: TargetNodePort, NotRun: cross},
		{Name: "hostPort, other node", Kind: KindHTTP, Target: TargetHostPort, HostPort: true, NotRun: cross},
		{Name: "DNS: Service name to ClusterIP", Kind: KindDNS, Target: TargetDNSName, NotRun: dns},
		{Name: "egress to own node", Kind: KindTCP, Target: TargetNodeOwn},
		{Name: "egress to other node", Kind: KindTCP, Target: TargetNodeOther, NotRun: cross},
	}
	for i := range checks {
		checks[i].Role = RoleClient
	}
	// The policies select the cross-node server; on one node, the
	// "cross-node" server is on the same node and the policy checks
	// still mean something, so they run there too.
	pol := []Check{
		{Name: "policy deny ingress: client blocked", Phase: PhaseDenyIngress, Role: RoleClient, Target: TargetServerCross, Blocked: true},
		{Name: "policy deny ingress: unselected server reachable", Phase: PhaseDenyIngress, Role: RoleClient, Target: TargetServerSame},
		{Name: "policy allow ingress: selected client reachable", Phase: PhaseAllowIngress, Role: RoleClient, Target: TargetServerCross},
		{Name: "policy allow ingress: other pod blocked", Phase: PhaseAllowIngress, Role: RoleOther, Target: TargetServerCross, Blocked: true},
		{Name: "policies removed: other pod reachable", Phase: PhasePolicyRemoved, Role: RoleOther, Target: TargetServerCross},
		{Name: "policy deny egress: client blocked", Phase: PhaseDenyEgress, Role: RoleEgressClient, Target: TargetServerCross, Blocked: true},
		{Name: "policy deny egress removed: client reachable", Phase: PhaseEgressRemoved, Role: RoleEgressClient, Target: TargetServerCross},
	}
	for i := range pol {
		pol[i].Kind = KindHTTP
		pol[i].Policy = true
	}
	return append(checks, pol...)
}

// Phases returns the phases the checks use, in order.
func Phases(checks []Check) []Phase {
	seen := map[Phase]bool{}
	var out []Phase
	for p := PhaseBasic; p <= PhaseEgressRemoved; p++ {
		for _, c := range checks {
			if c.Phase == p && c.NotRun == "" && !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}
