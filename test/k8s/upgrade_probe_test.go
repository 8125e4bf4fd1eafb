package k8s_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/podnet/podnet/netns"
)

// The traffic of TestRollingUpgrade and TestRoutingModeChange: every
// pair of a client pod and a destination is probed the whole time, each
// probe a TCP connect from inside the client's network namespace
// (dialFrom), and each pair is either allowed or denied by the policies
// in force.

const (
	// trafficEvery is how often a pair is probed: 25 probes a second.
	trafficEvery = 40 * time.Millisecond
	// trafficTimeout is how long a probe waits for the connect: an
	// allowed probe not connected by then failed. A dropped SYN is sent
	// again only after a second, so any timeout under that counts every
	// drop; 500 ms rather than less leaves room for a loaded 2-core
	// machine's scheduling.
	trafficTimeout = 500 * time.Millisecond
	// Each pair probes from source ports of its own, trafficPorts of
	// them from trafficPortBase up, in turn: one client reaching one
	// server both directly and through a DNAT (a ClusterIP, a host port)
	// from the same source port would make two connections with one
	// reply tuple, which conntrack may refuse while the first's entry
	// lives (10 s after its reset).
	// A port comes round again after 60 s (conntrack keeps a closed
	// connection 10 s, an unanswered one 120 s: no probe may go
	// unanswered for a path whose NAT changes later, see
	// serviceProgrammed); the ports are below the ephemeral range.
	trafficPortBase = 10000
	trafficPorts    = 1500
)

// trafficPair is one client and one destination, and what the policies
// say of it.
type trafficPair struct {
	name string // "upg-cla1 -> upg-srv2"
	// ports is the first of the pair's source ports (trafficPorts).
	ports   int
	path    string // same-node, cross-node, clusterip, hostport
	ns      *netns.NetNS
	dst     netip.AddrPort
	allowed bool
}

// trafficProbe is one connect: when it started, and whether it
// connected (ok) or was answered at all (a reset counts: the
// destination was reached).
type trafficProbe struct {
	start        time.Time
	ok, answered bool
	done         bool
	// why is what a wrong probe saw, for the log.
	why string
}

// pairLog is one pair's probes, in the order they were started.
type pairLog struct {
	pair   trafficPair
	mu     sync.Mutex
	probes []trafficProbe
}

// traffic probes every pair until stopped.
type traffic struct {
	logs   []*pairLog
	cancel context.CancelFunc
	wg     sync.WaitGroup
	events []trafficEvent
}

// trafficEvent is a step of the test, to place failed probes in time.
type trafficEvent struct {
	at   time.Time
	what string
}

// startTraffic starts probing every pair, each every trafficEvery, each
// probe in a goroutine of its own so that a dropped one delays nothing.
func startTraffic(pairs []trafficPair) *traffic {
	ctx, cancel := context.WithCancel(context.Background())
	tr := &traffic{cancel: cancel}
	for i, p := range pairs {
		p.ports = trafficPortBase + i*trafficPorts
		l := &pairLog{pair: p}
		tr.logs = append(tr.logs, l)
		tr.wg.Go(func() { l.run(ctx) })
	}
	return tr
}

func (l *pairLog) run(ctx context.Context) {
	tickProbes(ctx, trafficEvery, func() func() {
		l.mu.Lock()
		i := len(l.probes)
		l.probes = append(l.probes, trafficProbe{start: time.Now()})
		l.mu.Unlock()
		return func() {
			p := dialFromPort(l.pair.ns, l.pair.ports+i%trafficPorts, l.pair.dst, trafficTimeout)
			l.mu.Lock()
			l.probes[i].ok = p.result == probeConnected
			l.probes[i].answered = p.answered()
			l.probes[i].done = true
			l.probes[i].why = probeOutcome(p)
			l.mu.Unlock()
		}
	})
}

// mark records a step of the test.
func (tr *traffic) mark(what string) {
	tr.events = append(tr.events, trafficEvent{at: time.Now(), what: what})
}

// stop ends the probing and waits for the last probes.
func (tr *traffic) stop() {
	tr.cancel()
	tr.wg.Wait()
}

// settled says whether every pair's last n finished probes all had its
// expected verdict, and if not, which pair is not there yet.
func (tr *traffic) settled(n int) error { return tr.settledAs(n, true) }

// settledAs is settled with policy in force (policyOn) or not: without
// it every pair, the denied ones too, must connect.
func (tr *traffic) settledAs(n int, policyOn bool) error {
	for _, l := range tr.logs {
		l.mu.Lock()
		var last []trafficProbe
		for i := len(l.probes) - 1; i >= 0 && len(last) < n; i-- {
			if l.probes[i].done {
				last = append(last, l.probes[i])
			}
		}
		l.mu.Unlock()
		if len(last) < n {
			return fmt.Errorf("%s: %d probes so far", l.pair.name, len(last))
		}
		allowed := l.pair.allowed || !policyOn
		for _, p := range last {
			if allowed && !p.ok {
				return fmt.Errorf("%s (%s): an allowed probe failed", l.pair.name, l.pair.path)
			}
			if !allowed && p.answered {
				return fmt.Errorf("%s (%s): a denied probe got through", l.pair.name, l.pair.path)
			}
		}
	}
	return nil
}

// trafficResult is what the probes of one window (from, to) found.
type trafficResult struct {
	probes, failedAllowed, deniedThrough int
	// longestGap is the longest time between two successful probes of
	// an allowed pair (the window's ends count as successes), gapPair
	// the pair, gapAt when the gap began.
	longestGap time.Duration
	gapPair    string
	gapAt      time.Time
	// runs are the failed stretches, in time order, for the log.
	runs []failedRun
}

// failedRun is a stretch of consecutive wrong probes of one pair.
type failedRun struct {
	pair        string
	first, last time.Time
	n           int
	denied      bool   // denied probes that got through, not allowed ones that failed
	why         string // what the first one saw
}

// result counts the finished probes started in [from, to).
func (tr *traffic) result(from, to time.Time) trafficResult {
	var r trafficResult
	for _, l := range tr.logs {
		l.mu.Lock()
		probes := slices.Clone(l.probes)
		l.mu.Unlock()
		lastOK := from
		var run *failedRun
		for _, p := range probes {
			if !p.done || p.start.Before(from) || !p.start.Before(to) {
				continue
			}
			r.probes++
			wrong := (l.pair.allowed && !p.ok) || (!l.pair.allowed && p.answered)
			switch {
			case wrong && l.pair.allowed:
				r.failedAllowed++
			case wrong:
				r.deniedThrough++
			}
			if wrong {
				if run == nil {
					run = &failedRun{pair: l.pair.name + " (" + l.pair.path + ")", first: p.start, denied: !l.pair.allowed, why: p.why}
				}
				run.last, run.n = p.start, run.n+1
			} else if run != nil {
				r.runs = append(r.runs, *run)
				run = nil
			}
			if l.pair.allowed && p.ok {
				r.noteGap(l.pair.name, lastOK, p.start)
				lastOK = p.start
			}
		}
		if run != nil {
			r.runs = append(r.runs, *run)
		}
		if l.pair.allowed {
			r.noteGap(l.pair.name, lastOK, to)
		}
	}
	slices.SortFunc(r.runs, func(a, b failedRun) int { return a.first.Compare(b.first) })
	return r
}

func (r *trafficResult) noteGap(pair string, from, to time.Time) {
	if d := to.Sub(from); d > r.longestGap {
		r.longestGap, r.gapPair, r.gapAt = d, pair, from
	}
}

// summary is the result's one line.
func (r trafficResult) summary(pairs int, window time.Duration) string {
	return fmt.Sprintf("%d probes over %d pairs in %s: %d allowed probes failed, %d denied probes got through, longest gap of an allowed pair %s (%s)",
		r.probes, pairs, window.Round(100*time.Millisecond), r.failedAllowed, r.deniedThrough,
		r.longestGap.Round(time.Millisecond), r.gapPair)
}

// timeline is the test's steps and the failed stretches, in time order,
// relative to from.
func (tr *traffic) timeline(r trafficResult, from time.Time) string {
	type line struct {
		at   time.Time
		text string
	}
	var lines []line
	for _, e := range tr.events {
		lines = append(lines, line{e.at, e.what})
	}
	for i, f := range r.runs {
		if i == 40 {
			lines = append(lines, line{f.first, fmt.Sprintf("... and %d more failed stretches", len(r.runs)-40)})
			break
		}
		what := "allowed probes failed"
		if f.denied {
			what = "DENIED PROBES GOT THROUGH"
		}
		lines = append(lines, line{f.first, fmt.Sprintf("  %s: %d %s until +%.3fs (first: %s)", f.pair, f.n, what, f.last.Sub(from).Seconds(), f.why)})
	}
	slices.SortStableFunc(lines, func(a, b line) int { return a.at.Compare(b.at) })
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "+%8.3fs %s\n", l.at.Sub(from).Seconds(), l.text)
	}
	return b.String()
}

// probeOutcome says what a probe saw, in words.
func probeOutcome(p probe) string {
	switch p.result {
	case probeConnected:
		return "connected"
	case probeRefused:
		return "refused"
	case probeDropped:
		return fmt.Sprintf("no answer in %s", trafficTimeout)
	}
	return fmt.Sprintf("error after %s: %v", p.end.Sub(p.start).Round(time.Millisecond), p.err)
}
