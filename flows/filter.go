package flows

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Filter selects records. Within a field any value matches; every field
// set must match; an empty filter matches every record. The fields about
// one side match either side: a namespace, pod or port filter matches a
// record whose source or destination has it.
type Filter struct {
	Namespaces []string
	// Pods are "namespace/name".
	Pods     []string
	Verdicts []Verdict
	// Protocols are canonical: TCP, UDP, SCTP, ICMP, ICMPv6, or the
	// protocol number (ParseProtocol).
	Protocols []string
	Ports     []uint16
	Nodes     []string
	// Policies are "namespace/name" for a NetworkPolicy, "name" for a
	// ClusterNetworkPolicy: a record matches when one of its rules is of
	// the policy.
	Policies []string
}

// The query parameters of a filter (FilterParams lists them).
const (
	ParamNamespace = "namespace"
	ParamPod       = "pod"
	ParamVerdict   = "verdict"
	ParamProtocol  = "protocol"
	ParamPort      = "port"
	ParamNode      = "node"
	ParamPolicy    = "policy"
)

// FilterParams are the query parameters ParseFilter reads.
var FilterParams = []string{ParamNamespace, ParamPod, ParamVerdict, ParamProtocol, ParamPort, ParamNode, ParamPolicy}

// Dropped is a filter's "verdict=dropped": either drop verdict. No
// record has it; ParseFilter reads it as both.
const Dropped Verdict = "dropped"

// ParamError is a query parameter's value a filter cannot take.
type ParamError struct {
	Param, Value, Want string
}

func (e *ParamError) Error() string { return fmt.Sprintf("%s %q: %s", e.Param, e.Value, e.Want) }

// Match reports whether f selects rec.
func (f Filter) Match(rec Record) bool {
	if len(f.Namespaces) > 0 && !slices.Contains(f.Namespaces, rec.Src.Namespace) && !slices.Contains(f.Namespaces, rec.Dst.Namespace) {
		return false
	}
	if len(f.Pods) > 0 && !f.matchPod(rec) {
		return false
	}
	if len(f.Verdicts) > 0 && !slices.Contains(f.Verdicts, rec.Verdict) {
		return false
	}
	if len(f.Protocols) > 0 && !slices.Contains(f.Protocols, rec.Protocol) {
		return false
	}
	if len(f.Ports) > 0 && !slices.Contains(f.Ports, rec.Src.Port) && !slices.Contains(f.Ports, rec.Dst.Port) {
		return false
	}
	if len(f.Nodes) > 0 && !slices.Contains(f.Nodes, rec.Node) {
		return false
	}
	return len(f.Policies) == 0 || f.matchPolicy(rec)
}

func (f Filter) matchPod(rec Record) bool {
	// An endpoint without a pod has an empty key, which no filter value
	// is: no key string is built for the common miss.
	for _, p := range f.Pods {
		if podIs(rec.Src, p) || podIs(rec.Dst, p) {
			return true
		}
	}
	return false
}

func podIs(e Endpoint, key string) bool {
	ns, name, _ := strings.Cut(key, "/")
	return e.Pod != "" && e.Pod == name && e.Namespace == ns
}

func (f Filter) matchPolicy(rec Record) bool {
	for _, r := range rec.Rules {
		if slices.Contains(f.Policies, r.Policy()) {
			return true
		}
	}
	return false
}

// Policy is the name the rule's policy goes by in filters and metrics:
// "namespace/name" of a NetworkPolicy, the name of a cluster one.
func (r Rule) Policy() string {
	if r.Namespace == "" {
		return r.Name
	}
	return r.Namespace + "/" + r.Name
}

// ParseFilter reads a filter from query parameters (FilterParams; others
// are left to the caller). A parameter may be repeated, or hold values
// separated by commas. A pod is "namespace/name", or a name alone with
// exactly one namespace parameter; a verdict is forwarded,
// dropped-policy, dropped-guard, or dropped for both drops; a protocol a
// name or number (ParseProtocol); a port 1 to 65535. A name that is not
// one Kubernetes could have is an error; one that simply does not exist
// matches nothing.
func ParseFilter(q url.Values) (Filter, error) {
	var f Filter
	var err error
	if f.Namespaces, err = parseEach(q, ParamNamespace, parseNamespace); err != nil {
		return Filter{}, err
	}
	if f.Pods, err = parseEach(q, ParamPod, func(v string) (string, error) { return parsePod(v, f.Namespaces) }); err != nil {
		return Filter{}, err
	}
	verdicts, err := parseEach(q, ParamVerdict, parseVerdict)
	if err != nil {
		return Filter{}, err
	}
	for _, v := range verdicts {
		if v == Dropped {
			f.Verdicts = appendNew(f.Verdicts, DroppedPolicy, DroppedGuard)
		} else {
			f.Verdicts = appendNew(f.Verdicts, v)
		}
	}
	if f.Protocols, err = parseEach(q, ParamProtocol, ParseProtocol); err != nil {
		return Filter{}, err
	}
	if f.Ports, err = parseEach(q, ParamPort, parsePort); err != nil {
		return Filter{}, err
	}
	if f.Nodes, err = parseEach(q, ParamNode, parseNode); err != nil {
		return Filter{}, err
	}
	if f.Policies, err = parseEach(q, ParamPolicy, parsePolicy); err != nil {
		return Filter{}, err
	}
	return f, nil
}

// parseEach parses every value of the parameter, split at commas,
// without duplicates.
func parseEach[T comparable](q url.Values, param string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, raw := range q[param] {
		for v := range strings.SplitSeq(raw, ",") {
			v = strings.TrimSpace(v)
			t, err := parse(v)
			if err != nil {
				return nil, &ParamError{Param: param, Value: v, Want: err.Error()}
			}
			out = appendNew(out, t)
		}
	}
	return out, nil
}

func appendNew[T comparable](s []T, vs ...T) []T {
	for _, v := range vs {
		if !slices.Contains(s, v) {
			s = append(s, v)
		}
	}
	return s
}

// Query is f as query parameters: one per field set, its values
// separated by commas (so that a map of one value per key, as the API
// server's pod proxy takes, carries it), which ParseFilter reads back.
func (f Filter) Query() url.Values {
	q := url.Values{}
	set := func(param string, vs []string) {
		if len(vs) > 0 {
			q.Set(param, strings.Join(vs, ","))
		}
	}
	set(ParamNamespace, f.Namespaces)
	set(ParamPod, f.Pods)
	set(ParamVerdict, strs(f.Verdicts, func(v Verdict) string { return string(v) }))
	set(ParamProtocol, f.Protocols)
	set(ParamPort, strs(f.Ports, func(p uint16) string { return strconv.Itoa(int(p)) }))
	set(ParamNode, f.Nodes)
	set(ParamPolicy, f.Policies)
	return q
}

func strs[T any](s []T, str func(T) string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = str(v)
	}
	return out
}

func parseNamespace(v string) (string, error) {
	if errs := validation.IsDNS1123Label(v); len(errs) > 0 {
		return "", fmt.Errorf("not a namespace name: %s", errs[0])
	}
	return v, nil
}

func parseName(v string) (string, error) {
	if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
		return "", fmt.Errorf("not a name: %s", errs[0])
	}
	return v, nil
}

func parsePod(v string, namespaces []string) (string, error) {
	ns, name, ok := strings.Cut(v, "/")
	if !ok {
		if len(namespaces) != 1 {
			return "", fmt.Errorf("want namespace/name, or a name with one namespace")
		}
		ns, name = namespaces[0], v
	}
	if _, err := parseNamespace(ns); err != nil {
		return "", err
	}
	if _, err := parseName(name); err != nil {
		return "", err
	}
	return ns + "/" + name, nil
}

func parsePolicy(v string) (string, error) {
	ns, name, ok := strings.Cut(v, "/")
	if !ok {
		return parseName(v)
	}
	if _, err := parseNamespace(ns); err != nil {
		return "", err
	}
	if _, err := parseName(name); err != nil {
		return "", err
	}
	return v, nil
}

func parseNode(v string) (string, error) {
	if v == "" || len(v) > 253 || strings.ContainsFunc(v, func(c rune) bool { return c == '/' || c == ',' || c < 0x21 || c == 0x7f }) {
		return "", fmt.Errorf("not a node name")
	}
	return v, nil
}

func parseVerdict(v string) (Verdict, error) {
	switch v := Verdict(strings.ToLower(v)); v {
	case Forwarded, DroppedPolicy, DroppedGuard, Dropped:
		return v, nil
	}
	return "", fmt.Errorf("want forwarded, dropped-policy, dropped-guard or dropped")
}

func parsePort(v string) (uint16, error) {
	p, err := strconv.ParseUint(v, 10, 16)
	if err != nil || p == 0 {
		return 0, fmt.Errorf("want a port number, 1 to 65535")
	}
	return uint16(p), nil
}

// protocolNames are the protocols records name, by number.
var protocolNames = map[uint64]string{1: "ICMP", 6: "TCP", 17: "UDP", 58: "ICMPv6", 132: "SCTP"}

// ParseProtocol is a protocol as records name it: TCP, UDP, SCTP, ICMP,
// ICMPv6 (any case), or a number 0 to 255 (the name when it has one).
func ParseProtocol(v string) (string, error) {
	for _, name := range protocolNames {
		if strings.EqualFold(v, name) {
			return name, nil
		}
	}
	n, err := strconv.ParseUint(v, 10, 8)
	if err != nil {
		return "", fmt.Errorf("want tcp, udp, sctp, icmp, icmpv6 or a protocol number")
	}
	if name, ok := protocolNames[n]; ok {
		return name, nil
	}
	return strconv.FormatUint(n, 10), nil
}
