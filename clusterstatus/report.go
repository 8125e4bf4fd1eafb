package clusterstatus

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/podnet/podnet/agent/agentstatus"
)

// Report is the cluster's status: one row per node, the control
// objects, and what is wrong.
type Report struct {
	Nodes   []NodeReport  `json:"nodes"`
	Control ControlReport `json:"control"`
	// Problems make the command fail; Warnings do not (a rollout in
	// progress, a setting that differs between nodes).
	Problems []string `json:"problems"`
	Warnings []string `json:"warnings"`
}

// OK is true when there is no problem.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// NodeReport is one node's row.
type NodeReport struct {
	Node  string `json:"node"`
	Pod   string `json:"pod,omitempty"`
	Ready bool   `json:"ready"`
	// Agent is the agent's own document, when it answered.
	Agent *agentstatus.Document `json:"agent,omitempty"`
	// Problems are this node's, also in Report.Problems with the node
	// named.
	Problems []string `json:"problems,omitempty"`
}

// ControlReport is what the API holds of podnet's control objects.
type ControlReport struct {
	// Model is the IPAM model the agents run (node-cidr, blocks, etcd;
	// "mixed" or "unknown").
	Model                   string         `json:"model"`
	IPAMCRDs                []string       `json:"ipamCRDs"`
	ClusterNetworkPolicyCRD bool           `json:"clusterNetworkPolicyCRD"`
	Pools                   []Pool         `json:"pools,omitempty"`
	Blocks                  int            `json:"blocks"`
	BlocksByNode            map[string]int `json:"blocksByNode,omitempty"`
	// Note says what the model keeps where, in words.
	Note string `json:"note,omitempty"`
}

// policyStaleFactor: a policy table not rewritten for this many resync
// intervals is stale (the service rewrites it every interval).
const policyStaleFactor = 3

// Judge makes the report of in.
func Judge(in Input) Report {
	r := Report{Problems: []string{}, Warnings: []string{}}
	byNode := map[string][]Agent{}
	for _, a := range in.Agents {
		byNode[a.Node] = append(byNode[a.Node], a)
	}
	names := map[string]bool{}
	for _, n := range in.Nodes {
		names[n.Name] = true
		r.Nodes = append(r.Nodes, judgeNode(n, pickAgent(byNode[n.Name])))
	}
	for node, as := range byNode {
		if !names[node] {
			for _, a := range as {
				r.Warnings = append(r.Warnings, fmt.Sprintf("agent pod %s is on %q, which is not a Node", a.Pod, orNone(node)))
			}
		}
	}
	if len(in.Agents) == 0 {
		r.Problems = append(r.Problems, fmt.Sprintf("no podnet agent pods in namespace %s with labels %s: is podnet deployed (or in another namespace: --namespace)?", in.Namespace, in.Selector))
	}
	for _, n := range r.Nodes {
		for _, p := range n.Problems {
			r.Problems = append(r.Problems, "node "+n.Node+": "+p)
		}
	}
	docs := documents(r.Nodes)
	r.Warnings = append(r.Warnings, differences(docs)...)
	r.Control = judgeControl(in, docs, &r)
	return r
}

// pickAgent is the node's agent pod that counts: a ready one, else the
// newest that is not being deleted, else any (nil: none).
func pickAgent(as []Agent) *Agent {
	if len(as) == 0 {
		return nil
	}
	best := &as[0]
	for i := range as {
		a := &as[i]
		if a.Ready && !best.Ready || !a.Deleting && best.Deleting && a.Ready == best.Ready {
			best = a
		}
	}
	return best
}

func orNone(s string) string {
	if s == "" {
		return "(no node)"
	}
	return s
}

// judgeNode is one node's row and its problems.
func judgeNode(n Node, a *Agent) NodeReport {
	nr := NodeReport{Node: n.Name}
	if a == nil {
		nr.Problems = append(nr.Problems, "no podnet agent pod: the DaemonSet does not run on this node (its nodeSelector, nodeAffinity or tolerations exclude it, or the pod was not created)")
	} else {
		nr.Pod, nr.Agent = a.Pod, a.Status
		nr.Problems = append(nr.Problems, agentProblems(a)...)
		nr.Ready = len(nr.Problems) == 0
	}
	if !n.Ready {
		why := ""
		if n.NotReadyReason != "" {
			why = ": " + n.NotReadyReason
		}
		nr.Problems = append(nr.Problems, "Node is NotReady"+why)
	}
	return nr
}

// agentProblems says what is wrong with one agent pod and its document.
func agentProblems(a *Agent) []string {
	var ps []string
	switch {
	case a.Deleting:
		ps = append(ps, fmt.Sprintf("agent pod %s is being deleted", a.Pod))
	case a.Phase == "Pending" && a.Unschedulable != "":
		ps = append(ps, fmt.Sprintf("agent pod %s cannot be scheduled: %s", a.Pod, a.Unschedulable))
	case a.Phase != "Running":
		ps = append(ps, fmt.Sprintf("agent pod %s is %s%s", a.Pod, a.Phase, containerWords(a)))
	case !a.Ready && a.Status == nil:
		ps = append(ps, fmt.Sprintf("agent pod %s is not ready%s", a.Pod, containerWords(a)))
	}
	if len(ps) > 0 {
		return ps
	}
	if a.Status == nil {
		return []string{fmt.Sprintf("agent pod %s: no status: %s", a.Pod, a.StatusError)}
	}
	d := a.Status
	if d.Degraded {
		ps = append(ps, "agent degraded: its settings cannot be used, it leaves the node as it is")
	}
	for _, s := range d.Services {
		if !s.Ready {
			ps = append(ps, fmt.Sprintf("%s not ready: %s", s.Name, s.Reason))
		}
	}
	if !d.Ready && len(ps) == 0 {
		ps = append(ps, "agent not ready")
	}
	if p := d.Policy; p != nil && !p.LastApplied.IsZero() && p.ResyncSeconds > 0 && p.AgeSeconds > policyStaleFactor*p.ResyncSeconds {
		ps = append(ps, fmt.Sprintf("network policy last applied %s ago, but it is rewritten every %s: the node's rules may be stale",
			seconds(p.AgeSeconds), seconds(p.ResyncSeconds)))
	}
	return ps
}

// containerWords is the agent container's state for a sentence.
func containerWords(a *Agent) string {
	var parts []string
	if a.Container != "" {
		parts = append(parts, "container "+a.Container)
	}
	if a.LastTermination != "" {
		parts = append(parts, "last terminated: "+a.LastTermination)
	}
	if a.Restarts > 0 {
		parts = append(parts, fmt.Sprintf("%d %s", a.Restarts, plural(int(a.Restarts), "restart", "restarts")))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Second).String()
}

func documents(nodes []NodeReport) []*agentstatus.Document {
	var out []*agentstatus.Document
	for _, n := range nodes {
		if n.Agent != nil {
			out = append(out, n.Agent)
		}
	}
	return out
}

// differences warns of settings the agents do not share: expected while
// a rollout changes them node by node, wrong if it stays.
func differences(docs []*agentstatus.Document) []string {
	var ws []string
	for _, f := range []struct {
		what string
		get  func(*agentstatus.Document) string
	}{
		{"versions", func(d *agentstatus.Document) string { return strings.TrimSuffix(d.Version+" "+d.Revision, " ") }},
		{"datastores", func(d *agentstatus.Document) string { return d.Datastore + "/" + d.IPAM }},
		{"routing modes", func(d *agentstatus.Document) string { return d.RoutingMode }},
		{"encryption", func(d *agentstatus.Document) string { return d.Encryption.Mode }},
	} {
		by := map[string][]string{}
		for _, d := range docs {
			if !d.Degraded {
				by[f.get(d)] = append(by[f.get(d)], d.Node)
			}
		}
		if len(by) < 2 {
			continue
		}
		var parts []string
		for v, nodes := range by {
			sort.Strings(nodes)
			parts = append(parts, fmt.Sprintf("%s on %s", v, strings.Join(nodes, ", ")))
		}
		sort.Strings(parts)
		ws = append(ws, fmt.Sprintf("agents differ in %s: %s (a rollout in progress, or nodes configured apart)", f.what, strings.Join(parts, "; ")))
	}
	return ws
}

// model is the IPAM model the agents report.
func model(docs []*agentstatus.Document) string {
	var ms []string
	for _, d := range docs {
		if d.IPAM != "" && !slices.Contains(ms, d.IPAM) {
			ms = append(ms, d.IPAM)
		}
	}
	switch len(ms) {
	case 0:
		return "unknown"
	case 1:
		return ms[0]
	}
	return "mixed"
}
