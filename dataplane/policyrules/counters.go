package policyrules

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/policy"
)

// RuleKey names a rule of a policy in one direction: index Index of
// spec.ingress or spec.egress of Policy (namespace/name).
type RuleKey struct {
	Policy    string
	Direction Direction
	Index     int
}

// ClusterRuleKey names a ClusterNetworkPolicy rule in one direction:
// index Index of spec.ingress or spec.egress of Policy (its name), with
// its tier and what it does (a broken Deny or Pass rule denies).
type ClusterRuleKey struct {
	Policy    string
	Tier      policy.Tier
	Action    policy.Action
	Direction Direction
	Index     int
}

// PodDirection names an isolated pod's side.
type PodDirection struct {
	Pod       policy.PodKey
	Direction Direction
}

// Count is what a counter saw.
type Count struct {
	Packets, Bytes uint64
}

// Counters are the packet counts of the ruleset: the first packets of
// connections (later ones pass as established and count nowhere).
type Counters struct {
	// Allowed counts by policy rule, summed over the pods, peer sets and
	// families the rule is written for.
	Allowed map[RuleKey]Count
	// Denied counts, by pod and direction, what no rule allowed.
	Denied map[PodDirection]Count
	// Cluster counts by ClusterNetworkPolicy rule, summed like Allowed:
	// what each Accept returned, Deny dropped and Pass sent on to the
	// next tier.
	Cluster map[ClusterRuleKey]Count
}

// Counters reads the counters of every pod chain in the table. They
// start at zero when a chain is created or rewritten (its pod's rules
// changed), and on a resync.
func (r *Renderer) Counters() (Counters, error) {
	out := Counters{Allowed: map[RuleKey]Count{}, Denied: map[PodDirection]Count{}, Cluster: map[ClusterRuleKey]Count{}}
	chains, err := r.conn.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return out, fmt.Errorf("nftables: list chains: %w", err)
	}
	for _, c := range chains {
		if c.Table.Name != TableName || c.Hooknum != nil {
			continue
		}
		rules, err := r.conn.GetRules(c.Table, c)
		if err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed meanwhile
			}
			return out, fmt.Errorf("nftables: list the rules of %s: %w", c.Name, err)
		}
		for _, rule := range rules {
			cnt, ok := counterOf(rule)
			if !ok {
				continue
			}
			note, _ := userdata.GetString(rule.UserData, userdata.TypeComment)
			if k, ok := parseAllow(note); ok {
				out.Allowed[k] = add(out.Allowed[k], cnt)
			} else if k, ok := parseDeny(note); ok {
				out.Denied[k] = add(out.Denied[k], cnt)
			} else if k, ok := parseCluster(note); ok {
				out.Cluster[k] = add(out.Cluster[k], cnt)
			}
		}
	}
	return out, nil
}

func add(a, b Count) Count { return Count{a.Packets + b.Packets, a.Bytes + b.Bytes} }

func counterOf(r *nftables.Rule) (Count, bool) {
	for _, e := range r.Exprs {
		if c, ok := e.(*expr.Counter); ok {
			return Count{c.Packets, c.Bytes}, true
		}
	}
	return Count{}, false
}

func parseDirection(s string) (Direction, bool) {
	switch s {
	case "ingress":
		return Ingress, true
	case "egress":
		return Egress, true
	}
	return 0, false
}

// parseAllow reads "allow <namespace/name> <direction> <index>".
func parseAllow(s string) (RuleKey, bool) {
	f := strings.Fields(s)
	if len(f) != 4 || f[0] != "allow" {
		return RuleKey{}, false
	}
	d, ok := parseDirection(f[2])
	i, err := strconv.Atoi(f[3])
	return RuleKey{Policy: f[1], Direction: d, Index: i}, ok && err == nil
}

// parseDeny reads "deny <namespace/name> <direction>".
func parseDeny(s string) (PodDirection, bool) {
	f := strings.Fields(s)
	if len(f) != 3 || f[0] != "deny" {
		return PodDirection{}, false
	}
	ns, name, ok := strings.Cut(f[1], "/")
	d, dok := parseDirection(f[2])
	return PodDirection{Pod: policy.PodKey{Namespace: ns, Name: name}, Direction: d}, ok && dok
}

// parseCluster reads "cnp <tier> <action> <policy> <direction> <index>"
// (the deny log's "cnp-log" rules have no counter).
func parseCluster(s string) (ClusterRuleKey, bool) {
	f := strings.Fields(s)
	if len(f) != 6 || f[0] != "cnp" {
		return ClusterRuleKey{}, false
	}
	k := ClusterRuleKey{Policy: f[3]}
	switch f[1] {
	case policy.AdminTier.String():
		k.Tier = policy.AdminTier
	case policy.BaselineTier.String():
		k.Tier = policy.BaselineTier
	default:
		return ClusterRuleKey{}, false
	}
	switch f[2] {
	case policy.Accept.String():
		k.Action = policy.Accept
	case policy.Deny.String():
		k.Action = policy.Deny
	case policy.Pass.String():
		k.Action = policy.Pass
	default:
		return ClusterRuleKey{}, false
	}
	d, ok := parseDirection(f[4])
	i, err := strconv.Atoi(f[5])
	k.Direction, k.Index = d, i
	return k, ok && err == nil
}
