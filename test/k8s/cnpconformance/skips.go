package cnpconformance

import (
	"fmt"
	"regexp"
	"strings"
)

// Profile is the suite's conformance profile podnet is judged by.
const Profile = "ClusterNetworkPolicy"

// ExperimentalFeatures are the profile's experimental features podnet
// builds and opts into (the suite's SupportedFeature names at v0.3.0):
// named ports in rules, and Nodes peers in egress rules. The standard
// feature, ClusterNetworkPolicy, comes with the profile.
var ExperimentalFeatures = []string{"ClusterNetworkPolicyNamedPorts", "ClusterNetworkPolicyEgressNodePeers"}

// Skip is one test of the suite (its ShortName), or one subtest of it
// (the name its t.Run gives, as written in the source), left out by name.
type Skip struct {
	Test    string
	Subtest string // empty: the whole test
	Reason  string // the class: "no SCTP in the kernel"
	Why     string // what in the test needs it
	// Experimental: the test needs one of the profile's experimental
	// features, and the report counts it at that level.
	Experimental bool
}

// Name is the skip as go test names it: the suite's test and subtest,
// spaces as underscores, below the suite's top-level test.
func (s Skip) Name() string {
	n := suiteTest + "/" + s.Test
	if s.Subtest != "" {
		n += "/" + strings.ReplaceAll(s.Subtest, " ", "_")
	}
	return n
}

// suiteTest is the suite's top-level test, which runs the profile.
const suiteTest = "TestConformanceProfiles"

const noSCTP = "no SCTP in the kernel"

// SCTPSkips are the tests and subtests that probe SCTP (agnhost connect
// --protocol=sctp from a client pod), which cannot run on a kernel
// without SCTP: there every SCTP probe fails whatever the policy, so the
// test would fail whatever podnet does. A test is skipped whole when each
// of its subtests probes SCTP, and otherwise only its subtests that do.
// TestClusterNetworkPolicyConformance skips them only when
// conformance.KernelSCTP fails; TestSCTPSkips proves against the suite's
// source that the list is exactly the SCTP-probing tests.
var SCTPSkips = []Skip{
	{Test: "CNPAdminTierIngressSCTP", Reason: noSCTP, Why: "ingress rules on SCTP: every subtest probes SCTP ports 9003 and 9005 only"},
	{Test: "CNPAdminTierEgressSCTP", Reason: noSCTP, Why: "egress rules on SCTP: every subtest probes SCTP ports 9003 and 9005 only"},
	{Test: "CNPBaselineTierIngressSCTP", Reason: noSCTP, Why: "ingress rules on SCTP: every subtest probes SCTP ports 9003 and 9005 only"},
	{Test: "CNPBaselineTierEgressSCTP", Reason: noSCTP, Why: "egress rules on SCTP: every subtest probes SCTP ports 9003 and 9005 only"},
	{Test: "CNPAdminTierGress", Reason: noSCTP, Why: "every subtest probes SCTP beside TCP and UDP"},
	{Test: "CNPBaselineTierGress", Reason: noSCTP, Why: "every subtest probes SCTP beside TCP and UDP"},
	{Test: "CNPAdminTierEgressInlineCIDRPeers", Reason: noSCTP, Why: "both subtests probe SCTP port 9003 beside TCP 80 and UDP 53"},
	{Test: "CNPBaselineTierEgressInlineCIDRPeers", Reason: noSCTP, Why: "both subtests probe SCTP port 9003 beside TCP 80 and UDP 53"},
	{Test: "CNPAdminTierPortRange", Reason: noSCTP, Why: "both subtests probe an SCTP port range beside TCP and UDP"},
	{Test: "CNPBaselineTierPortRange", Reason: noSCTP, Why: "both subtests probe an SCTP port range beside TCP and UDP"},
	{Test: "CNPAdminTierEgressNodePeers", Subtest: "Should support a 'deny-egress' rule policy for egress-node-peer", Reason: noSCTP,
		Why: "probes SCTP on the host-network server's port beside TCP and UDP (the test's last subtest; the others run)", Experimental: true},
	{Test: "CNPBaselineTierEgressNodePeers", Subtest: "Should support a 'deny-egress' rule policy for egress-node-peer", Reason: noSCTP,
		Why: "probes SCTP on the host-network server's port beside TCP and UDP (the test's last subtest; the others run)", Experimental: true},
}

// Within are the skips of the tests a focus (Run.Focus) selects.
func Within(skips []Skip, focus string) ([]Skip, error) {
	if focus == "" {
		return skips, nil
	}
	re, err := regexp.Compile(focus)
	if err != nil {
		return nil, fmt.Errorf("focus %q: %w", focus, err)
	}
	var in []Skip
	for _, s := range skips {
		if re.MatchString(s.Test) {
			in = append(in, s)
		}
	}
	return in, nil
}

// skipPattern is go test's -test.skip for the skips: one alternative
// per skip, each element anchored and quoted, so that it names that test
// or subtest and nothing else. Empty when there are none.
func skipPattern(skips []Skip) string {
	var alts []string
	for _, s := range skips {
		elems := []string{suiteTest, s.Test}
		if s.Subtest != "" {
			elems = append(elems, strings.ReplaceAll(s.Subtest, " ", "_"))
		}
		for i, e := range elems {
			elems[i] = "^" + regexp.QuoteMeta(e) + "$"
		}
		alts = append(alts, strings.Join(elems, "/"))
	}
	return strings.Join(alts, "|")
}
