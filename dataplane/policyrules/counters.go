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
}

// Counters reads the counters of every pod chain in the table. They
// start at zero when a chain is created or rewritten (its pod's rules
// changed), and on a resync.
func (r *Renderer) Counters() (Counters, error) {
	out := Counters{Allowed: map[RuleKey]Count{}, Denied: map[PodDirection]Count{}}
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
