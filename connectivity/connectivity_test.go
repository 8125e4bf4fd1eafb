package connectivity

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestPlanOneNode(t *testing.T) {
	checks := Plan(Cluster{Nodes: 1, DNS: false})
	notRun := map[string]string{}
	for _, c := range checks {
		if c.NotRun != "" {
			notRun[c.Name] = c.NotRun
		}
	}
	for _, name := range []string{"pod to pod, across nodes (TCP)", "NodePort, other node", "hostPort, other node", "DNS: Service name to ClusterIP"} {
		if notRun[name] == "" {
			t.Errorf("%q runs on one node without DNS", name)
		}
	}
	if notRun["pod to pod, same node (TCP)"] != "" || notRun["policy deny ingress: client blocked"] != "" {
		t.Errorf("same-node and policy checks must run on one node: %v", notRun)
	}
	if got := Phases(checks); len(got) != 6 || got[0] != PhaseBasic {
		t.Errorf("Phases = %v", got)
	}
	for _, c := range Plan(Cluster{Nodes: 2, DNS: true}) {
		if c.NotRun != "" {
			t.Errorf("%q not run on two nodes with DNS: %s", c.Name, c.NotRun)
		}
	}
}

func TestJudge(t *testing.T) {
	self := []string{"10.0.0.5"}
	enforced := Env{PolicyEnforced: true, HostPorts: true, ClusterIP: "10.96.0.10"}
	unknown := Env{PolicyUnknown: "podnet does not run", ClusterIP: "10.96.0.10"}
	for _, tc := range []struct {
		name  string
		check Check
		probe ProbeResult
		env   Env
		want  Status
		says  string
	}{
		{"reached, own address", Check{NoSNAT: true}, ProbeResult{Reached: true, Peer: "10.0.0.5:4242", Self: self}, enforced, Pass, "own address"},
		{"SNAT", Check{NoSNAT: true}, ProbeResult{Reached: true, Peer: "192.0.2.1:4242", Self: self}, enforced, Fail, "SNAT"},
		{"IPv6 peer", Check{NoSNAT: true}, ProbeResult{Reached: true, Peer: "[fd00::5]:1", Self: []string{"fd00::5"}}, enforced, Pass, ""},
		{"not reached", Check{}, ProbeResult{Error: "i/o timeout", Attempts: 3}, enforced, Fail, "i/o timeout (3 attempts)"},
		{"blocked", Check{Blocked: true}, ProbeResult{}, enforced, Pass, "blocked"},
		{"policy not enforced by podnet", Check{Blocked: true}, ProbeResult{Reached: true}, enforced, Fail, "despite"},
		{"policy where nothing says it is enforced", Check{Blocked: true}, ProbeResult{Reached: true}, unknown, NotJudged, "podnet does not run"},
		{"hostPort without podnet", Check{HostPort: true}, ProbeResult{Error: "refused"}, unknown, NotJudged, "optional"},
		{"hostPort with podnet", Check{HostPort: true}, ProbeResult{Error: "refused"}, enforced, Fail, "refused"},
		{"DNS", Check{Kind: KindDNS}, ProbeResult{Reached: true, Addrs: []string{"10.96.0.10"}}, enforced, Pass, ""},
		{"DNS wrong answer", Check{Kind: KindDNS}, ProbeResult{Reached: true, Addrs: []string{"10.96.0.11"}}, enforced, Fail, "want the ClusterIP"},
		{"DNS failed", Check{Kind: KindDNS}, ProbeResult{Error: "lookup echo: i/o timeout", Attempts: 20}, enforced, Fail, "lookup"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Judge(tc.check, tc.probe, tc.env)
			if got.Status != tc.want || !strings.Contains(got.Detail, tc.says) {
				t.Errorf("Judge = %s %q, want %s with %q", got.Status, got.Detail, tc.want, tc.says)
			}
		})
	}
}

func TestParseProbe(t *testing.T) {
	p, err := parseProbe([]byte("podnet diag: noise\n{\"reached\":true,\"attempts\":2,\"peer\":\"10.0.0.5:1\"}\n"))
	if err != nil || !p.Reached || p.Attempts != 2 || p.Peer != "10.0.0.5:1" {
		t.Errorf("parseProbe = %+v, %v", p, err)
	}
	if _, err := parseProbe([]byte("exec format error\n")); err == nil || !strings.Contains(err.Error(), "exec format error") {
		t.Errorf("parseProbe of no result: %v, want the log quoted", err)
	}
}

func TestReport(t *testing.T) {
	r := &Report{Namespace: "podnet-connectivity-x", Nodes: []string{"a", "b"}, Network: "podnet"}
	r.Add(Result{Check: "one", Status: Pass, Duration: 1500 * time.Millisecond, ProbeMillis: 12, Attempts: 1})
	r.Add(Result{Check: "two", Status: Fail, Detail: "i/o timeout"})
	r.Add(Skipped(Check{Name: "three", NotRun: "one node"}))
	if r.OK() || r.Passed != 1 || r.Failed != 1 || r.NotRun != 1 {
		t.Fatalf("counts %+v", r)
	}
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"one  ", "FAIL", "1.5s", "i/o timeout", "FAILED: 1 passed, 1 failed, 1 not run", "12ms/1"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	j, _ := json.Marshal(r)
	if !strings.Contains(string(j), `"durationMillis":1500`) {
		t.Errorf("json: %s", j)
	}
}

func TestQualify(t *testing.T) {
	checks := Plan(Cluster{Nodes: 2, DNS: true})
	results := make([]Result, len(checks))
	for i, c := range checks {
		results[i] = Result{Check: c.Name, Status: Pass, reached: !c.Blocked}
		switch c.Name {
		case "pod to pod, across nodes (TCP)":
			results[i] = Result{Check: c.Name, Status: Fail}
		case "pod to pod, same node (TCP)":
			// Reached, but failed (SNAT): the target is reachable.
			results[i] = Result{Check: c.Name, Status: Fail, reached: true}
		}
	}
	Qualify(checks, results)
	for i, c := range checks {
		want := Pass
		switch {
		case c.Name == "pod to pod, across nodes (TCP)" || c.Name == "pod to pod, same node (TCP)":
			want = Fail
		case c.Blocked && c.Target == TargetServerCross:
			want = NotJudged
		}
		if results[i].Status != want {
			t.Errorf("%q: %s, want %s", c.Name, results[i].Status, want)
		}
	}
	// On one node the baseline does not run; the verdicts stay.
	checks = Plan(Cluster{Nodes: 1, DNS: true})
	results = make([]Result, len(checks))
	for i, c := range checks {
		results[i] = Result{Check: c.Name, Status: Pass}
		if c.NotRun != "" {
			results[i] = Skipped(c)
		}
	}
	Qualify(checks, results)
	for i, c := range checks {
		if c.Blocked && results[i].Status != Pass {
			t.Errorf("one node, %q: %s", c.Name, results[i].Status)
		}
	}
}
