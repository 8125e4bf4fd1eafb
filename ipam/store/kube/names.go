package kube

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"github.com/podnet/podnet/ipam"
)

// Labels the store puts on objects.
const (
	// LabelSet marks the objects of a non-default key prefix.
	LabelSet = "podnet.io/ipam-set"
	// LabelNode is on a block affine to a node: the node's name.
	LabelNode = "podnet.io/node"
)

// Group and Version of the custom resources.
const (
	Group   = "podnet.io"
	Version = "v1"
)

// resource is one kind of object and the keys it holds.
type resource struct {
	segment string // key segment under the prefix
	plural  string
	kind    string
}

var (
	pools  = &resource{"ipam/pools/", "ippools", "IPPool"}
	blocks = &resource{"ipam/blocks/", "ipamblocks", "IPAMBlock"}
	nodes  = &resource{"ipam/nodes/", "ipamnodes", "IPAMNode"}
	// resources in the order of their key segments.
	resources = []*resource{blocks, nodes, pools}
)

// ref is the object a key names.
type ref struct {
	res  *resource
	key  string
	name string // the object's name, with the set's prefix
}

func (r ref) String() string { return r.res.plural + "/" + r.name }

// names maps keys under one prefix to objects and back.
type names struct {
	prefix string
	set    string // "" for ipam.DefaultPrefix
}

func newNames(prefix string) names {
	if prefix == "" || prefix == ipam.DefaultPrefix {
		return names{prefix: ipam.DefaultPrefix}
	}
	sum := sha256.Sum256([]byte(prefix))
	return names{prefix: prefix, set: hex.EncodeToString(sum[:])[:10]}
}

// setName is the object name of a key's last segment.
func (n names) setName(s string) string {
	if n.set == "" {
		return s
	}
	return n.set + "." + s
}

// selector selects the set's objects.
func (n names) selector() string {
	if n.set == "" {
		return "!" + LabelSet
	}
	return LabelSet + "=" + n.set
}

// CIDRName is a block's object name: the masked CIDR with '.', ':' and
// '/' as '-' (10.244.1.64/26 -> 10-244-1-64-26). netip's canonical text
// has no '-', so distinct blocks get distinct names.
func CIDRName(p netip.Prefix) string {
	return strings.Map(func(r rune) rune {
		if r == '.' || r == ':' || r == '/' {
			return '-'
		}
		return r
	}, p.Masked().String())
}

// ref returns the object key names, or an error for a key the Kubernetes
// store cannot hold.
func (n names) ref(key string) (ref, error) {
	rest, ok := strings.CutPrefix(key, n.prefix)
	if ok {
		for _, res := range resources {
			if last, ok := strings.CutPrefix(rest, res.segment); ok {
				return n.refIn(res, key, last)
			}
		}
	}
	return ref{}, fmt.Errorf("kubernetes store: key %q: not a pool, block or node key under %q (the only objects the Kubernetes store holds)", key, n.prefix)
}

func (n names) refIn(res *resource, key, last string) (ref, error) {
	name := last
	if res == blocks {
		p, err := ipam.Keys{Prefix: n.prefix}.ParseBlockKey(key)
		if err != nil || p != p.Masked() || (ipam.Keys{Prefix: n.prefix}).Block(p) != key {
			return ref{}, fmt.Errorf("kubernetes store: key %q: not a block key (want %s<address>-<bits>, the block's masked CIDR)", key, n.prefix+res.segment)
		}
		name = CIDRName(p)
	}
	name = n.setName(name)
	if err := checkName(name); err != nil {
		return ref{}, fmt.Errorf("kubernetes store: key %q: %s name %q: %v", key, res.kind, name, err)
	}
	return ref{res: res, key: key, name: name}, nil
}

// checkName accepts a DNS-1123 subdomain, what every object name must be.
func checkName(s string) error {
	if len(s) == 0 || len(s) > 253 {
		return fmt.Errorf("must be 1 to 253 characters")
	}
	for _, label := range strings.Split(s, ".") {
		if !dnsLabel(label, 63) {
			return fmt.Errorf("must be lowercase letters, digits, '-' and '.', each part starting and ending with a letter or digit")
		}
	}
	return nil
}

// dnsLabel reports whether s is 1 to max lowercase alphanumerics and '-',
// starting and ending alphanumeric.
func dnsLabel(s string, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (c != '-' || i == 0 || i == len(s)-1) {
			return false
		}
	}
	return true
}

// labelValue reports whether s may be a label's value.
func labelValue(s string) bool {
	if len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || i == len(s)-1 || (c != '-' && c != '_' && c != '.')) {
			return false
		}
	}
	return true
}

// keyOf returns the key of an object of res read from the API, checking
// that its name is the one the key would give (else the object is not
// the store's, or corrupt).
func (n names) keyOf(res *resource, name string, spec []byte) (string, error) {
	last, ok := strings.CutPrefix(name, n.setName(""))
	if !ok {
		return "", fmt.Errorf("kubernetes store: %s/%s: not in set %q", res.plural, name, n.set)
	}
	if res != blocks {
		return n.prefix + res.segment + last, nil
	}
	var v struct {
		CIDR netip.Prefix `json:"cidr"`
	}
	if err := json.Unmarshal(spec, &v); err != nil || !v.CIDR.IsValid() {
		return "", fmt.Errorf("kubernetes store: %s/%s: spec.cidr: not a CIDR (%v)", res.plural, name, err)
	}
	if want := CIDRName(v.CIDR); last != want {
		return "", fmt.Errorf("kubernetes store: %s/%s: corrupt: spec.cidr %s belongs in %s", res.plural, name, v.CIDR, n.setName(want))
	}
	return ipam.Keys{Prefix: n.prefix}.Block(v.CIDR.Masked()), nil
}

// labels returns the labels an object holding spec carries, and checks
// that spec belongs under r's key.
func (n names) labels(r ref, spec []byte) (map[string]string, error) {
	var v struct {
		CIDR     *netip.Prefix `json:"cidr"`
		Affinity string        `json:"affinity"`
		Name     *string       `json:"name"`
		Node     *string       `json:"node"`
	}
	if err := json.Unmarshal(spec, &v); err != nil {
		return nil, fmt.Errorf("kubernetes store: %s: value is not a JSON object: %v", r.key, err)
	}
	labels := map[string]string{}
	if n.set != "" {
		labels[LabelSet] = n.set
	}
	last := r.name[len(n.setName("")):]
	switch r.res {
	case blocks:
		if v.CIDR == nil || CIDRName(*v.CIDR) != last {
			return nil, fmt.Errorf("kubernetes store: %s: value's cidr %v does not match the key", r.key, v.CIDR)
		}
		if node, ok := strings.CutPrefix(v.Affinity, "host:"); ok && labelValue(node) {
			labels[LabelNode] = node
		}
	case pools:
		if v.Name != nil && *v.Name != last {
			return nil, fmt.Errorf("kubernetes store: %s: value's name %q does not match the key", r.key, *v.Name)
		}
	case nodes:
		if v.Node != nil && *v.Node != last {
			return nil, fmt.Errorf("kubernetes store: %s: value's node %q does not match the key", r.key, *v.Node)
		}
	}
	return labels, nil
}
