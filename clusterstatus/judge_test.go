package clusterstatus

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/podnet/podnet/agent/agentstatus"
)

func doc(node string) *agentstatus.Document {
	return &agentstatus.Document{Node: node, Version: "v1.0.0", Datastore: "kubernetes", IPAM: "node-cidr", RoutingMode: "auto",
		Encryption: agentstatus.Encryption{Mode: "none"}, Ready: true, Services: []agentstatus.Service{{Name: "source", Ready: true}},
		Policy: &agentstatus.Policy{LastApplied: time.Now(), AgeSeconds: 10, ResyncSeconds: 60, Rules: 4}, Attachments: 3}
}

func healthy() Input {
	return Input{Namespace: "kube-system", Selector: "app=podnet",
		Nodes: []Node{{Name: "n1", Ready: true, PodCIDRs: []string{"10.244.0.0/24"}}, {Name: "n2", Ready: true, PodCIDRs: []string{"10.244.1.0/24"}}},
		Agents: []Agent{{Pod: "podnet-a", Node: "n1", Phase: "Running", Ready: true, Container: "running", Status: doc("n1")},
			{Pod: "podnet-b", Node: "n2", Phase: "Running", Ready: true, Container: "running", Status: doc("n2")}}}
}

func TestJudge(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Input)
		// want are substrings of the problems, in order; warn of the
		// warnings.
		want, warn []string
	}{
		{"healthy", func(*Input) {}, nil, nil},
		{"no agent pod", func(in *Input) { in.Agents = in.Agents[:1] }, []string{"node n2: no podnet agent pod"}, nil},
		{"no agents at all", func(in *Input) { in.Agents = nil },
			[]string{"no podnet agent pods in namespace kube-system with labels app=podnet", "node n1: no podnet agent pod", "node n2: no podnet agent pod"}, nil},
		{"crash loop", func(in *Input) {
			a := &in.Agents[1]
			a.Ready, a.Status, a.Container, a.LastTermination, a.Restarts = false, nil, "waiting: CrashLoopBackOff back-off 20s", "Error, exit code 1: open store: invalid database", 2
		}, []string{"node n2: agent pod podnet-b is not ready (container waiting: CrashLoopBackOff back-off 20s, last terminated: Error, exit code 1: open store: invalid database, 2 restarts)"}, nil},
		{"pending", func(in *Input) {
			a := &in.Agents[1]
			a.Phase, a.Ready, a.Status, a.Unschedulable = "Pending", false, nil, "Unschedulable: 0/2 nodes are available"
		}, []string{"node n2: agent pod podnet-b cannot be scheduled: Unschedulable: 0/2 nodes are available"}, nil},
		{"unreachable", func(in *Input) { in.Agents[0].Status, in.Agents[0].StatusError = nil, "GET /status: timeout" },
			[]string{"node n1: agent pod podnet-a: no status: GET /status: timeout"}, nil},
		{"service not ready", func(in *Input) {
			d := in.Agents[0].Status
			d.Ready, d.Services = false, append(d.Services, agentstatus.Service{Name: "routes", Reason: "underlay gone"})
		}, []string{"node n1: routes not ready: underlay gone"}, nil},
		{"degraded", func(in *Input) {
			in.Agents[1].Status = &agentstatus.Document{Node: "n2", Degraded: true, Services: []agentstatus.Service{{Name: "config", Reason: `routing_mode "x"`}}}
		}, []string{"node n2: agent degraded", `node n2: config not ready: routing_mode "x"`}, nil},
		{"stale policy", func(in *Input) { in.Agents[0].Status.Policy.AgeSeconds = 600 },
			[]string{"node n1: network policy last applied 10m0s ago, but it is rewritten every 1m0s"}, nil},
		{"node not ready", func(in *Input) {
			in.Nodes[0].Ready, in.Nodes[0].NotReadyReason = false, "KubeletNotReady container runtime network not ready"
		},
			[]string{"node n1: Node is NotReady: KubeletNotReady container runtime network not ready"}, nil},
		{"no podCIDR", func(in *Input) { in.Nodes[1].PodCIDRs = nil }, []string{"node n2: no spec.podCIDRs"}, nil},
		{"rollout", func(in *Input) { in.Agents[1].Status.Version, in.Agents[1].Status.RoutingMode = "v1.1.0", "vxlan" }, nil,
			[]string{"agents differ in versions: v1.0.0 on n1; v1.1.0 on n2", "agents differ in routing modes: auto on n1; vxlan on n2"}},
		{"terminating and new pod", func(in *Input) {
			in.Agents = append(in.Agents, Agent{Pod: "podnet-old", Node: "n2", Phase: "Running", Deleting: true})
		}, nil, nil},
		{"blocks without pools", func(in *Input) {
			for _, a := range in.Agents {
				a.Status.IPAM = "blocks"
			}
			in.Control = Control{IPAMCRDs: []string{"ippools", "ipamblocks"}}
		}, []string{"does not serve podnet.io/v1 ipamnodes", "no enabled IPPool"}, nil},
		{"wireguard missing peer", func(in *Input) {
			for _, a := range in.Agents {
				a.Status.Encryption = agentstatus.Encryption{Mode: "wireguard", Implementation: "kernel", Peers: 1}
			}
			in.Agents[0].Status.Encryption.Peers = 0
		}, nil, []string{"node n1: wireguard has 0 peers of 1 other"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := healthy()
			tc.edit(&in)
			r := Judge(in)
			check(t, "problems", r.Problems, tc.want)
			check(t, "warnings", r.Warnings, tc.warn)
			if r.OK() != (len(tc.want) == 0) {
				t.Errorf("OK %v with problems %q", r.OK(), r.Problems)
			}
		})
	}
}

func check(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s %q, want %d like %q", what, got, len(want), want)
		return
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("%s[%d] %q, want it to contain %q", what, i, got[i], want[i])
		}
	}
}

func TestRender(t *testing.T) {
	in := healthy()
	in.Agents = in.Agents[:1]
	r := Judge(in)
	var b bytes.Buffer
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"NODE", "n1 ", "ready", "kubernetes/node-cidr", "applied 10s ago", "n2 ", "NOT READY",
		"IPAM model: node-cidr (node-CIDR model: no pools or blocks", "1 problem:", "node n2: no podnet agent pod"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := WriteJSON(&b, r); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || len(back.Nodes) != 2 || back.Nodes[0].Agent == nil || len(back.Problems) != 1 {
		t.Errorf("json: %v\n%s", err, b.String())
	}
}
