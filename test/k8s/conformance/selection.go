package conformance

import (
	"regexp"
	"strings"
)

// Selection chooses the specs a run runs: ginkgo's label filter, then
// the named specs skipped, then, for a partial run, a focus.
type Selection struct {
	// LabelFilter is ginkgo's --label-filter.
	LabelFilter string
	// Skips are the specs left out by name (--skip), each for a reason.
	Skips []Skip
	// Focus, when set, narrows the run further to the specs whose text it
	// matches (--focus), e.g. one Describe of the selection.
	Focus string
}

// Reason is why a spec is left out by name.
type Reason string

const (
	// NetworkSafety: the spec sends traffic to an address outside the
	// harness (a public resolver or host, a documentation range), or
	// configures the cluster's DNS to forward to one. It must never run,
	// whatever else the selection says.
	NetworkSafety Reason = "network safety"
	// NoImage: the spec runs an image that cannot be made here.
	NoImage Reason = "no image"
	// NeedsCloud: the spec needs a cloud provider.
	NeedsCloud Reason = "needs a cloud"
)

// Skip is a spec left out by its full text, for a reason.
type Skip struct {
	Name   string // the spec's full text, as e2e.test's dry run lists it
	Reason Reason
	Why    string // what in the spec makes it so
}

// BaseLabelFilter keeps the [sig-network] specs that may run on a shared
// two-node cluster beside other specs: not [Serial] or [Disruptive]
// (they need the cluster to themselves, or break it on purpose), not
// [Flaky], and no [Feature:...] (an optional feature, a cloud load
// balancer, IPv6 or dual-stack, SCTP, NetworkPolicy, or a feature gate
// that is off by default) and not [Alpha].
const BaseLabelFilter = "sig-network && !Serial && !Disruptive && !Flaky && !/^Feature:/ && !Alpha"

// Skips are the specs left out by name. Network-safety entries are listed
// even where the label filter already excludes the spec, so that no
// change of the filter can let them run; TestDryRun checks that every
// entry names a spec of the suite and that none of them is selected.
var Skips = []Skip{
	{"[sig-network] Networking should provide Internet connection for containers [Feature:Networking-IPv4]", NetworkSafety,
		"connects from a pod to 8.8.8.8:53"},
	{"[sig-network] Networking should provide Internet connection for containers [Feature:Networking-IPv6] [Experimental][LinuxOnly]", NetworkSafety,
		"connects from a pod to 2001:4860:4860::8888:53"},
	{"[sig-network] Networking should provider Internet connection for containers using DNS [Feature:Networking-DNS]", NetworkSafety,
		"resolves google.com and connects to it on port 80"},
	{"[sig-network] DNS should provide DNS for the cluster [Provider:GCE]", NetworkSafety,
		"resolves google.com and GCE's metadata name through the cluster's DNS"},
	{"[sig-network] DNS configMap nameserver Change stubDomain should be able to change stubDomain configuration [Slow] [Serial]", NetworkSafety,
		"resolves 8.8.8.8's PTR record (dns.google) through the cluster's DNS, which it points at an upstream"},
	{"[sig-network] DNS configMap nameserver Forward PTR lookup should forward PTR records lookup to upstream nameserver [Slow] [Serial]", NetworkSafety,
		"resolves 8.8.8.8's PTR record (dns.google) through the cluster's DNS, which it points at an upstream"},
	{"[sig-network] DNS configMap nameserver Forward external name lookup should forward externalname lookup to upstream nameserver [Slow] [Serial]", NetworkSafety,
		"resolves an ExternalName Service of dns.google through the cluster's DNS, which it points at an upstream"},
	{"[sig-network] Services should be possible to connect to a service via ExternalIP when the external IP is not assigned to a node", NetworkSafety,
		"connects from a pod to 203.0.113.250 (TEST-NET-3), which only kube-proxy's externalIPs rule keeps on the node"},
	{"[sig-network] Service CIDRs should create Services and serve on different Service CIDRs", NetworkSafety,
		"adds the ServiceCIDR 203.0.113.0/24 (TEST-NET-3) and connects from a pod to 203.0.113.10"},
}

// MakeTestFocus narrows the selection to what `make test` runs, the specs
// that judge a CNI plugin's own duties (pod to pod on one node and across
// nodes, node to pod, host ports, no SNAT between pods, hairpin) and the
// Service and DNS paths every pod uses; the whole selection is `make
// conformance`, too long for every CI run.
const MakeTestFocus = `Networking Granular Checks: Pods |\[sig-network\] HostPort |NoSNAT |hairpin back to themselves through services|` +
	`Services should serve a basic endpoint from pods |Services should be able to create a functioning NodePort service |` +
	`DNS should provide DNS for services |DNS should provide DNS for the cluster \[Conformance\]`

// Default is the selection `make conformance` runs: BaseLabelFilter less
// Skips.
func Default() Selection { return Selection{LabelFilter: BaseLabelFilter, Skips: Skips} }

// SkipRegexp is --skip: each skipped spec's full text, whole. Ginkgo
// matches it against the suite's description, a space and the spec's
// text.
func (s Selection) SkipRegexp() string {
	var alts []string
	for _, k := range s.Skips {
		alts = append(alts, "(?:^| )"+regexp.QuoteMeta(k.Name)+"$")
	}
	return strings.Join(alts, "|")
}

// ginkgoFlags are the selection's flags, each prefixed: "--" for the
// ginkgo CLI, "--ginkgo." for e2e.test itself.
func (s Selection) ginkgoFlags(prefix string) []string {
	var flags []string
	if s.LabelFilter != "" {
		flags = append(flags, prefix+"label-filter="+s.LabelFilter)
	}
	if re := s.SkipRegexp(); re != "" {
		flags = append(flags, prefix+"skip="+re)
	}
	if s.Focus != "" {
		flags = append(flags, prefix+"focus="+s.Focus)
	}
	return flags
}
