package main

import (
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/flows"
	"github.com/podnet/podnet/sandbox"
)

// Shell completion is cobra's: `podnet completion bash|zsh|fish|powershell`
// prints the script (its help says how to install it), and the hidden
// __complete command answers the script's questions. The functions here
// give the answers that come from the node: the networks of the conf
// dir, the sandboxes podnet created, the namespaces in /run/netns. They
// read files only, never the network, since a shell waits on them.

// completeNetworks completes network names from the conf dir, as
// --conf-dir (or $NETCONFPATH) on the command line being completed says.
func completeNetworks(opts *globalOptions) cobra.CompletionFunc {
	return func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return networkNames(opts.confDir), cobra.ShellCompDirectiveNoFileComp
	}
}

func networkNames(confDir string) []cobra.Completion {
	dc, err := cni.LoadDir(confDir)
	if err != nil {
		return nil
	}
	var out []cobra.Completion
	for _, n := range dc.Networks {
		out = append(out, cobra.CompletionWithDesc(n.Name, "cniVersion "+n.CNIVersion+", plugins "+pluginTypes(n)))
	}
	return out
}

// completeSandboxes completes the names of podnet's sandboxes (podnet pod
// ls), leaving out those already on the command line.
func completeSandboxes(opts *globalOptions) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		all, _ := sandbox.NewStore(opts.stateDir).List()
		var out []cobra.Completion
		for _, sb := range all {
			if !slices.Contains(args, sb.Name) {
				out = append(out, cobra.CompletionWithDesc(sb.Name, sb.Namespace+" "+strings.Join(sb.IPs, ",")))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// netnsDir is where `ip netns` keeps named namespaces (a variable for
// the tests).
var netnsDir = "/run/netns"

// completeNetworkThenNetNS completes `pod VERB NETWORK NETNS`: a network,
// then a namespace name from /run/netns or a podnet sandbox's namespace
// path; after both, nothing.
func completeNetworkThenNetNS(opts *globalOptions) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		switch len(args) {
		case 0:
			return networkNames(opts.confDir), cobra.ShellCompDirectiveNoFileComp
		case 1:
			return netnsNames(opts.stateDir), cobra.ShellCompDirectiveDefault
		}
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
}

// netnsNames are the named namespaces (a name stands for its path under
// /run/netns) and the namespace paths of podnet's sandboxes not among
// them.
func netnsNames(stateDir string) []cobra.Completion {
	var out []cobra.Completion
	seen := map[string]bool{}
	if ents, err := os.ReadDir(netnsDir); err == nil {
		for _, e := range ents {
			out = append(out, e.Name())
			seen[e.Name()] = true
		}
	}
	all, _ := sandbox.NewStore(stateDir).List()
	for _, sb := range all {
		if name, ok := strings.CutPrefix(sb.NetNS, netnsDir+"/"); !ok || !seen[name] {
			out = append(out, cobra.CompletionWithDesc(sb.NetNS, "sandbox "+sb.Name))
		}
	}
	return out
}

// maxArgs completes nothing once a command has n arguments, so that a
// shell offers no file names where none is taken.
func maxArgs(n int, f cobra.CompletionFunc) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) >= n {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return f(cmd, args, toComplete)
	}
}

// flagValues are the values of flags that take one of a few words,
// completed wherever a command has the flag by that name. A flag whose
// words differ between commands (--mode) is registered where it is
// defined instead.
var flagValues = map[string][]string{
	"verdict":    {string(flows.Forwarded), string(flows.DroppedPolicy), string(flows.DroppedGuard), "dropped"},
	"output":     {outputText, outputJSON}, // where a command did not register its own
	"log-level":  {"debug", "info", "warn", "error"},
	"loopback":   {"in-process", "plugin"},
	"datastore":  {"etcd", "kubernetes"},
	"ipam":       {ipamNodeCIDR, ipamBlocks},
	"encryption": {"none", "wireguard"},
	"kind":       {"http", "udp", "tcp", "dns"},
	"expect":     {"reach", "blocked"},
}

// commandFlagValues are the words of flags whose words differ between
// commands, by command path.
var commandFlagValues = map[string]map[string][]string{
	"podnet policy explain": {"protocol": {"TCP", "UDP", "SCTP"}},
	"podnet flows":          {"protocol": {"tcp", "udp", "sctp", "icmp", "icmpv6"}},
}

// registerFlagValues walks the command tree and registers the completion
// of every flag named in flagValues, and of --network where it names a
// network of the conf dir. Flags that already have a completion keep it.
func registerFlagValues(cmd *cobra.Command, opts *globalOptions) {
	for name, values := range flagValues {
		if cmd.Flags().Lookup(name) != nil || cmd.PersistentFlags().Lookup(name) != nil {
			registerValues(cmd, name, values...)
		}
	}
	for name, values := range commandFlagValues[cmd.CommandPath()] {
		registerValues(cmd, name, values...)
	}
	if cmd.Flags().Lookup("network") != nil && cmd.Name() != "install" {
		_ = cmd.RegisterFlagCompletionFunc("network", completeNetworks(opts))
	}
	for _, c := range cmd.Commands() {
		registerFlagValues(c, opts)
	}
}

// registerValues completes a flag with fixed words; a second registration
// of the same flag is refused by cobra and ignored here.
func registerValues(cmd *cobra.Command, flag string, values ...string) {
	_ = cmd.RegisterFlagCompletionFunc(flag, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
}
