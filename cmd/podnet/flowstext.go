package main

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/podnet/podnet/flows"
)

// flowLine is a record as podnet flows prints it, one line: time, node,
// verdict, protocol, source -> destination, the rules that decided it,
// and the counts (an end's packets and bytes; a dropped burst's
// packets).
func flowLine(r flows.Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %-14s %-6s %s -> %s", r.Time.UTC().Format("2006-01-02 15:04:05.000"), r.Node, r.Verdict, r.Protocol, endpointText(r.Src), endpointText(r.Dst))
	rules := make([]string, len(r.Rules))
	for i, rule := range r.Rules {
		rules[i] = ruleText(rule)
	}
	if len(rules) == 0 && r.Verdict == flows.DroppedGuard {
		rules = append(rules, "source guard")
	}
	if len(rules) > 0 {
		b.WriteString("  " + strings.Join(rules, ", "))
	}
	switch {
	case r.Event == flows.End:
		fmt.Fprintf(&b, "  (end: %d packets, %d bytes)", r.Packets, r.Bytes)
	case r.Packets > 1:
		fmt.Fprintf(&b, "  (%d packets)", r.Packets)
	}
	return b.String()
}

// endpointText is namespace/pod, or the address, with the port.
func endpointText(e flows.Endpoint) string {
	host := e.PodKey()
	if host == "" {
		host = e.IP.String()
		if e.IP.Is6() && e.Port != 0 {
			host = "[" + host + "]"
		}
		if e.IP == (netip.Addr{}) {
			host = "?"
		}
	}
	if e.Port == 0 {
		return host
	}
	return host + ":" + strconv.Itoa(int(e.Port))
}

// ruleText is "NetworkPolicy shop/db ingress[0] Allow", "ClusterNetworkPolicy
// Admin deny-all ingress[1] Deny"; a NetworkPolicy that isolated the pod
// without a rule that allowed is "NetworkPolicy shop/db ingress (isolates)".
func ruleText(r flows.Rule) string {
	parts := []string{r.Kind}
	if r.Tier != "" {
		parts = append(parts, r.Tier)
	}
	parts = append(parts, r.Policy())
	if r.Index >= 0 {
		parts = append(parts, fmt.Sprintf("%s[%d]", r.Direction, r.Index))
	} else {
		parts = append(parts, r.Direction, "(isolates)")
	}
	if r.Action != "" {
		parts = append(parts, r.Action)
	}
	return strings.Join(parts, " ")
}

// mergeFlows merges the agents' records by time (then node and sequence
// number, so that one agent's order stands), keeping the newest limit (0:
// all), oldest first.
func mergeFlows(lists [][]flows.Record, limit int) []flows.Record {
	var all []flows.Record
	for _, l := range lists {
		all = append(all, l...)
	}
	slices.SortStableFunc(all, func(a, b flows.Record) int {
		return cmp.Or(a.Time.Compare(b.Time), cmp.Compare(a.Node, b.Node), cmp.Compare(a.Seq, b.Seq))
	})
	if limit > 0 && len(all) > limit {
		all = all[len(all)-limit:]
	}
	return all
}
