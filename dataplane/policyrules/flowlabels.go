package policyrules

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/flows"
	"github.com/podnet/podnet/policy"
)

// FlowLog is the flow verdicts' side of the table (WithFlowLabels): every
// rule of a pod chain that accepts sets the connection's conntrack label
// to its rule's id (FlowLabel), and every drop of a pod chain is first
// logged to NFLOG group Group with the prefix FlowPrefix of its id, at
// most Burst at once and Rate a second for the whole node (the table's
// limit object flow-log, shared like the deny log's).
//
// A label, not a mark: kube-proxy, Calico, Cilium and others own bits of
// the mark; the 128 label bits are only read and written by ct label
// expressions, and the kernel ORs what a rule sets into them, so the
// egress side's id (low 64 bits) and the ingress side's (high 64 bits)
// both survive on one connection.
type FlowLog struct {
	Group       uint16
	Rate, Burst uint32
}

// Defaults of the flow log.
const (
	DefaultFlowLogGroup = dataplane.FlowLogGroup
	DefaultFlowLogRate  = 1000
	DefaultFlowLogBurst = 1000
)

// WithFlowLabels writes the flow labels and the flow log; a zero field
// takes its default. Fixed for the Renderer's life, like WithDenyLog.
func WithFlowLabels(l FlowLog) Option {
	if l.Group == 0 {
		l.Group = DefaultFlowLogGroup
	}
	if l.Rate == 0 {
		l.Rate = DefaultFlowLogRate
	}
	if l.Burst == 0 {
		l.Burst = DefaultFlowLogBurst
	}
	return func(o *options) { o.flowLog = &l }
}

// flowLimitName is the table's limit object of the flow log.
const flowLimitName = "flow-log"

func (l *FlowLog) limit(t *nftables.Table) *nftables.NamedObj {
	return &nftables.NamedObj{Table: t, Name: flowLimitName, Type: nftables.ObjTypeLimit,
		Obj: &expr.Limit{Type: expr.LimitTypePkts, Rate: uint64(l.Rate), Unit: expr.LimitTimeSecond, Burst: l.Burst}}
}

// logExprs: limit name "flow-log" log prefix "podnet-flow <id>" group N.
func (l *FlowLog) logExprs(id uint64) []expr.Any {
	return []expr.Any{
		&expr.Objref{Type: unix.NFT_OBJECT_LIMIT, Name: flowLimitName},
		&expr.Log{Key: 1<<unix.NFTA_LOG_GROUP | 1<<unix.NFTA_LOG_PREFIX, Group: l.Group, Data: []byte(FlowPrefix(id))},
	}
}

// labelExprs: ct label set <the id on d's side>.
func labelExprs(id uint64, d Direction) []expr.Any {
	egress, ingress := id, uint64(0)
	if d == Ingress {
		egress, ingress = 0, id
	}
	return []expr.Any{
		&expr.Immediate{Register: reg1, Data: FlowLabel(egress, ingress)},
		&expr.Ct{Key: expr.CtKeyLABELS, Register: reg1, SourceRegister: true},
	}
}

// flowPrefix starts the flow log's prefixes.
const flowPrefix = "podnet-flow "

// FlowPrefix is the NFLOG prefix of a drop of rule id: "podnet-flow "
// and the id's 16 lowercase hex digits.
func FlowPrefix(id uint64) string { return fmt.Sprintf("%s%016x", flowPrefix, id) }

// ParseFlowPrefix reads what FlowPrefix wrote; ok is false for any other
// prefix (the deny log's, the guard's).
func ParseFlowPrefix(s string) (id uint64, ok bool) {
	hex, found := strings.CutPrefix(s, flowPrefix)
	if !found || len(hex) != 16 {
		return 0, false
	}
	id, err := strconv.ParseUint(hex, 16, 64)
	return id, err == nil && id != 0
}

// FlowLabel is the 16 bytes of a conntrack label holding egress in its
// bits 0-63 and ingress in its bits 64-127, as the kernel lays the label
// bitmap out: bit i is bit i%32 of the 32-bit word i/32, in host order
// (nf_connlabels_replace works on such words). What a ct label set
// writes and what conntrack's CTA_LABELS dumps are these bytes.
func FlowLabel(egress, ingress uint64) []byte {
	b := make([]byte, 0, 16)
	for _, v := range []uint64{egress, ingress} {
		b = append(b, binaryutil.NativeEndian.PutUint32(uint32(v))...)
		b = append(b, binaryutil.NativeEndian.PutUint32(uint32(v>>32))...)
	}
	return b
}

// ParseFlowLabel reads the ids of a conntrack label (CTA_LABELS, e.g.
// ti-mo/conntrack's Flow.Labels): 0 for a side no labelling rule
// accepted. A label shorter than 16 bytes is an error.
func ParseFlowLabel(b []byte) (egress, ingress uint64, err error) {
	if len(b) < 16 {
		return 0, 0, errors.New("conntrack label: " + strconv.Itoa(len(b)) + " bytes, want 16")
	}
	word := func(i int) uint64 { return uint64(binaryutil.NativeEndian.Uint32(b[4*i : 4*i+4])) }
	return word(0) | word(1)<<32, word(2) | word(3)<<32, nil
}

// The flows.Rule spellings.
const (
	kindNetworkPolicy = "NetworkPolicy"
	kindCluster       = "ClusterNetworkPolicy"
)

// flowID hashes key to a nonzero id: the same rule gets the same id in
// every process and on every node, without state.
func flowID(key string) uint64 {
	h := sha256.Sum256([]byte(key))
	if id := binary.BigEndian.Uint64(h[:8]); id != 0 {
		return id
	}
	return 1
}

// ruleID is the id of one policy rule: a hash of its identity, the
// fields of flows.Rule.
func ruleID(r flows.Rule) uint64 {
	return flowID(strings.Join([]string{"rule", r.Kind, r.Tier, r.Namespace, r.Name, r.Direction,
		strconv.Itoa(r.Index), r.Action}, "\x00"))
}

// dropID is the id of the final drop of pod's direction d, which names
// the policies that isolate it (IsolatedBy).
func dropID(pod policy.PodKey, d Direction, isolatedBy []string) uint64 {
	ps := slices.Clone(isolatedBy)
	slices.Sort(ps)
	return flowID("drop\x00" + pod.String() + "\x00" + d.String() + "\x00" + strings.Join(ps, "\x00"))
}

// npRule is a NetworkPolicy rule's flows.Rule (policy: namespace/name).
func npRule(pol string, d Direction, index int, action string) flows.Rule {
	ns, name, _ := strings.Cut(pol, "/")
	return flows.Rule{Kind: kindNetworkPolicy, Namespace: ns, Name: name, Direction: d.String(), Index: index, Action: action}
}

// cnpRule is a ClusterNetworkPolicy rule's flows.Rule.
func cnpRule(ref policy.ClusterRuleRef, d Direction) flows.Rule {
	action := ref.Action.String()
	if ref.Action == policy.Accept {
		action = "Allow"
	}
	return flows.Rule{Kind: kindCluster, Tier: ref.Tier.String(), Name: ref.Policy, Direction: d.String(), Index: ref.Index, Action: action}
}

// dropRules are the flows.Rules of a final drop: each isolating policy,
// Index -1.
func dropRules(d Direction, isolatedBy []string) []flows.Rule {
	out := make([]flows.Rule, 0, len(isolatedBy))
	for _, p := range isolatedBy {
		out = append(out, npRule(p, d, -1, "Deny"))
	}
	return out
}
