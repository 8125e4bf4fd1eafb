package conformance

import (
	"regexp"
	"slices"
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
	// NoSCTP: the spec opens SCTP sockets in pods and the machine's
	// kernel has no SCTP (no sctp module, and none it can load). Applied
	// only on such a machine (WithoutSCTP).
	NoSCTP Reason = "no SCTP in the kernel"
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
// [Flaky], not [Alpha], and no [Feature:...] (an optional feature, a
// cloud load balancer, IPv6 or dual-stack, SCTP Services, or a feature
// gate that is off by default) except [Feature:NetworkPolicy], which
// podnet implements: its specs run, the three SCTP ones
// ([Feature:SCTPConnectivity] too) included.
const BaseLabelFilter = "sig-network && !Serial && !Disruptive && !Flaky && !Alpha && (!/^Feature:/ || " + FeatureNetworkPolicy + ")"

// FeatureNetworkPolicy is the label of the Netpol specs that need a
// NetworkPolicy implementation (the Netpol API specs need none).
const FeatureNetworkPolicy = "Feature:NetworkPolicy"

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

// SCTPSkips are the specs that open SCTP sockets in pods: left out, with
// their reason, where the kernel has no SCTP (WithoutSCTP). The other
// Netpol specs that name SCTP only put it in a policy and probe TCP.
var SCTPSkips = []Skip{
	{"[sig-network] Netpol [Feature:SCTPConnectivity] [LinuxOnly] NetworkPolicy between server and client using SCTP should enforce policy based on Ports [Feature:NetworkPolicy]", NoSCTP,
		"serves and probes SCTP on ports 80 and 81"},
	{"[sig-network] Netpol [Feature:SCTPConnectivity] [LinuxOnly] NetworkPolicy between server and client using SCTP should enforce policy to allow traffic only from a pod in a different namespace based on PodSelector and NamespaceSelector [Feature:NetworkPolicy]", NoSCTP,
		"serves and probes SCTP on ports 80 and 81"},
	{"[sig-network] Netpol [Feature:SCTPConnectivity] [LinuxOnly] NetworkPolicy between server and client using SCTP should support a 'default-deny-ingress' policy [Feature:NetworkPolicy]", NoSCTP,
		"serves and probes SCTP on ports 80 and 81"},
}

// WithoutSCTP returns s with SCTPSkips skipped too.
func (s Selection) WithoutSCTP() Selection {
	s.Skips = append(slices.Clip(s.Skips), SCTPSkips...)
	return s
}

// MakeTestFocus narrows the selection to what `make test` runs, the specs
// that judge a CNI plugin's own duties (pod to pod on one node and across
// nodes, node to pod, host ports, no SNAT between pods, hairpin), the
// Service and DNS paths every pod uses, and five NetworkPolicy specs
// (netpolFocus); the whole selection is `make conformance`, too long for
// every CI run.
const MakeTestFocus = `Networking Granular Checks: Pods |\[sig-network\] HostPort |NoSNAT |hairpin back to themselves through services|` +
	`Services should serve a basic endpoint from pods |Services should be able to create a functioning NodePort service |` +
	`DNS should provide DNS for services |DNS should provide DNS for the cluster \[Conformance\]|` + netpolFocus

// netpolFocus is make test's part of the NetworkPolicy specs (TCP, the
// main Describe only): a default deny of ingress, ingress from another
// namespace by namespaceSelector, ingress on a named port, egress to a
// pod chosen by pod and namespace selectors, and egress to an ipBlock
// with an except.
const netpolFocus = `Netpol NetworkPolicy between server and client should ` +
	`(support a 'default-deny-ingress' policy|` +
	`enforce policy to allow traffic only from a different namespace, based on NamespaceSelector|` +
	`allow ingress access on one named port|` +
	`enforce egress policy allowing traffic to a server in a different namespace based on PodSelector and NamespaceSelector|` +
	`enforce except clause while egress access to server in CIDR block) `

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
