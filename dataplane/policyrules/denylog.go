package policyrules

import (
	"errors"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/policy"
)

// DenyLog is the opt-in log of denied packets: before its final drop,
// every pod chain sends the packet to NFLOG group Group, with a prefix
// naming the pod and the direction (LogPrefix), at most Burst packets at
// once and Rate a second after (nftables' "limit rate R/second burst B
// packets", whose bucket holds B), for the whole node: one limit, the
// table's limit object deny-log, is shared by every chain, so a flood
// to one pod costs the node no more than a flood to all.
//
// NFLOG and not the kernel's ring buffer: the kernel logs to it only
// from the initial network namespace by default. Nothing reads the group
// unless someone listens (package dataplane/nflog); unread, a record is
// dropped, and the packet is dropped as before.
type DenyLog struct {
	Group       uint16
	Rate, Burst uint32
}

// Defaults of the agent's deny log.
const (
	DefaultDenyLogGroup = 7370
	DefaultDenyLogRate  = 10
	DefaultDenyLogBurst = 20
)

// WithDenyLog writes the deny log into every pod chain. It is fixed for
// the Renderer's life: a Renderer starts with a resync, so a new one
// with another setting (or none) rewrites every chain.
func WithDenyLog(l DenyLog) Option { return func(o *options) { o.denyLog = &l } }

func (l *DenyLog) check() error {
	if l.Rate == 0 || l.Burst == 0 {
		// The kernel would take a burst of 0 for its default, 5.
		return errors.New("policy deny log: the rate and the burst must be at least 1")
	}
	return nil
}

// limitName is the table's limit object the deny log rules share.
const limitName = "deny-log"

func (l *DenyLog) limit(t *nftables.Table) *nftables.NamedObj {
	return &nftables.NamedObj{Table: t, Name: limitName, Type: nftables.ObjTypeLimit,
		Obj: &expr.Limit{Type: expr.LimitTypePkts, Rate: uint64(l.Rate), Unit: expr.LimitTimeSecond, Burst: l.Burst}}
}

// exprs is the rule: limit name "deny-log" log prefix "..." group N.
func (l *DenyLog) exprs(pod policy.PodKey, d Direction) []expr.Any {
	return []expr.Any{
		&expr.Objref{Type: unix.NFT_OBJECT_LIMIT, Name: limitName},
		&expr.Log{Key: 1<<unix.NFTA_LOG_GROUP | 1<<unix.NFTA_LOG_PREFIX, Group: l.Group, Data: []byte(LogPrefix(pod, d))},
	}
}

// logPrefix starts every prefix of the deny log; maxPrefix is the most
// the kernel keeps (NF_LOG_PREFIXLEN, 128, with the NUL).
const (
	logPrefix = "podnet-deny"
	maxPrefix = 127
)

// LogPrefix is the prefix of the deny log's records of pod's direction
// d: "podnet-deny ingress namespace/name" (or egress). A name too long
// for the kernel's 127 bytes is left out ("podnet-deny ingress"): the
// pod is then the packet's destination (ingress) or source (egress).
func LogPrefix(pod policy.PodKey, d Direction) string {
	s := logPrefix + " " + d.String() + " " + pod.String()
	if len(s) > maxPrefix {
		return logPrefix + " " + d.String()
	}
	return s
}

// ParseLogPrefix reads a prefix LogPrefix wrote; ok is false for any
// other. The pod is zero when its name was left out.
func ParseLogPrefix(s string) (pod policy.PodKey, d Direction, ok bool) {
	f := strings.Fields(s)
	if (len(f) != 2 && len(f) != 3) || f[0] != logPrefix {
		return pod, d, false
	}
	if d, ok = parseDirection(f[1]); !ok {
		return pod, d, false
	}
	if len(f) == 3 {
		ns, name, found := strings.Cut(f[2], "/")
		if !found || ns == "" || name == "" {
			return policy.PodKey{}, d, false
		}
		pod = policy.PodKey{Namespace: ns, Name: name}
	}
	return pod, d, true
}
