package connectivity

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"time"
)

// ProbeResult is what `podnet diag probe` prints, one JSON line: the wire
// format between a prober pod and the run.
type ProbeResult struct {
	// Reached: the last attempt reached the target (for DNS: resolved).
	Reached  bool `json:"reached"`
	Attempts int  `json:"attempts"`
	// Peer is the address the server saw the probe come from.
	Peer string `json:"peer,omitempty"`
	// Self is the prober's own addresses.
	Self []string `json:"self,omitempty"`
	// Addrs is the DNS answer.
	Addrs []string `json:"addrs,omitempty"`
	Error string   `json:"error,omitempty"`
	// Millis is how long the probe took, retries included, without its
	// pod's start.
	Millis int64 `json:"millis"`
}

// Status is a check's verdict.
type Status string

const (
	Pass      Status = "pass"
	Fail      Status = "FAIL"
	NotRun    Status = "not run"
	NotJudged Status = "not judged"
)

// Result is one row of the report.
type Result struct {
	Check    string        `json:"check"`
	Status   Status        `json:"status"`
	Detail   string        `json:"detail,omitempty"`
	Duration time.Duration `json:"-"`
	Millis   int64         `json:"durationMillis"`
	// ProbeMillis is the probe's own part of Millis (the rest is its
	// pod's start and end), with Attempts its tries.
	ProbeMillis int64 `json:"probeMillis,omitempty"`
	Attempts    int   `json:"attempts,omitempty"`
	// reached: the probe reached its target (whatever the verdict).
	reached bool
}

// Env is what the verdicts depend on beyond the probe.
type Env struct {
	// PolicyEnforced: the cluster's network is known to enforce
	// NetworkPolicy (podnet's agents run with --network-policy). When
	// false, a policy that did not block is not judged: nothing says the
	// network should have enforced it.
	PolicyEnforced bool
	// PolicyUnknown says why enforcement is not known.
	PolicyUnknown string
	// HostPorts: the network is known to map host ports (podnet runs).
	HostPorts bool
	// ClusterIP is the Service's, which its name must resolve to.
	ClusterIP string
}

// Judge gives a check's verdict from its probe's result.
func Judge(c Check, p ProbeResult, env Env) Result {
	r := Result{Check: c.Name, ProbeMillis: p.Millis, Attempts: p.Attempts, reached: p.Reached}
	switch {
	case c.Blocked && !p.Reached:
		r.Status, r.Detail = Pass, "blocked"
	case c.Blocked && env.PolicyEnforced:
		r.Status, r.Detail = Fail, fmt.Sprintf("reached despite the policy (%d attempts)", p.Attempts)
	case c.Blocked:
		r.Status, r.Detail = NotJudged, "reached despite the policy: "+env.PolicyUnknown
	case !p.Reached && c.HostPort && !env.HostPorts:
		r.Status, r.Detail = NotJudged, "not reached ("+p.Error+"); podnet does not run here and host ports are an optional CNI feature"
	case !p.Reached:
		r.Status, r.Detail = Fail, fmt.Sprintf("%s (%d attempts)", p.Error, p.Attempts)
	default:
		r.Status, r.Detail = judgeReached(c, p, env)
	}
	return r
}

func judgeReached(c Check, p ProbeResult, env Env) (Status, string) {
	if c.Kind == KindDNS {
		if !slices.Contains(p.Addrs, env.ClusterIP) {
			return Fail, fmt.Sprintf("resolved to %s, want the ClusterIP %s", strings.Join(p.Addrs, ","), env.ClusterIP)
		}
		return Pass, "resolved to " + env.ClusterIP
	}
	if c.NoSNAT {
		host, _, err := net.SplitHostPort(p.Peer)
		if err != nil {
			return Fail, fmt.Sprintf("the server's answer names no peer address (%q)", p.Peer)
		}
		if !slices.Contains(p.Self, host) {
			return Fail, fmt.Sprintf("SNAT between pods: the server saw %s, the client is %s", host, strings.Join(p.Self, ","))
		}
		return Pass, "server saw the client's own address " + host
	}
	if p.Peer != "" {
		return Pass, "reached; server saw " + p.Peer
	}
	return Pass, "reached"
}

// Failed is a check that produced no probe result: its pod did not run
// or its output did not parse.
func Failed(c Check, err error) Result {
	return Result{Check: c.Name, Status: Fail, Detail: err.Error()}
}

// Skipped is a check that does not run.
func Skipped(c Check) Result {
	return Result{Check: c.Name, Status: NotRun, Detail: c.NotRun}
}

// Qualify revisits the blocked checks that passed: a probe blocked while
// the same target was not reachable without any policy either (the
// phase-less check of the same kind and target did not reach it, or has
// no result) says nothing about the policy, so it is not judged. results are in the
// order of checks.
func Qualify(checks []Check, results []Result) {
	base := map[[2]string]int{}
	for i, c := range checks {
		if c.Phase == PhaseBasic {
			k := [2]string{string(c.Kind), string(c.Target)}
			if _, ok := base[k]; !ok {
				base[k] = i
			}
		}
	}
	for i, c := range checks {
		if !c.Blocked || results[i].Status != Pass {
			continue
		}
		// A baseline that did not run (one node) leaves the verdict.
		j, ok := base[[2]string{string(c.Kind), string(c.Target)}]
		if !ok || results[j].reached || results[j].Status == NotRun {
			continue
		}
		results[i].Status = NotJudged
		results[i].Detail = fmt.Sprintf("blocked, but %q did not pass without any policy either: the policy is not what blocked it", checks[j].Name)
	}
}
