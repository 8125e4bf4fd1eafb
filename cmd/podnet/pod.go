package main

import (
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/netplugin"
)

type podOptions struct {
	global      *globalOptions
	ifName      string
	containerID string
}

func newPodCommand(opts *globalOptions) *cobra.Command {
	po := &podOptions{global: opts}
	cmd := &cobra.Command{Use: "pod", Short: "Attach network namespaces to networks and detach them"}
	cmd.PersistentFlags().StringVar(&po.ifName, "ifname", envOr("CNI_IFNAME", netplugin.DefaultInterfaceName), "interface name in the namespace ($CNI_IFNAME)")
	cmd.PersistentFlags().StringVar(&po.containerID, "container-id", "", "container ID (default: derived from the namespace path)")
	cmd.AddCommand(
		po.verbCommand("add", "Attach a namespace to a network and print the result", po.add),
		po.verbCommand("check", "Check that an attachment is still as ADD left it", po.check),
		po.verbCommand("del", "Detach a namespace from a network (idempotent)", po.del),
		po.statusCommand(),
		newPodGCCommand(opts), newPodLsCommand(opts), newPodRmCommand(opts))
	return cmd
}

// attachmentVerb runs one verb on the attachment that NETWORK NETNS name.
type attachmentVerb func(cmd *cobra.Command, rt *cni.Runtime, list *cni.NetworkConfigList, conf *cni.RuntimeConf) error

// verbCommand is `pod <use> NETWORK NETNS`.
func (po *podOptions) verbCommand(use, short string, run attachmentVerb) *cobra.Command {
	return &cobra.Command{
		Use:   use + " NETWORK NETNS",
		Short: short,
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			list, err := po.global.network(args[0])
			if err != nil {
				return err
			}
			conf, err := po.runtimeConf(netnsPath(args[1]))
			if err != nil {
				return err
			}
			return run(cmd, po.global.runtime(), list, conf)
		},
	}
}

func (po *podOptions) add(cmd *cobra.Command, rt *cni.Runtime, list *cni.NetworkConfigList, conf *cni.RuntimeConf) error {
	ctx, cancel := po.global.context(cmd)
	defer cancel()
	res, err := rt.AddNetworkList(ctx, list, conf)
	if err != nil {
		return err
	}
	return printJSON(cmd, res)
}

func (po *podOptions) check(cmd *cobra.Command, rt *cni.Runtime, list *cni.NetworkConfigList, conf *cni.RuntimeConf) error {
	ctx, cancel := po.global.context(cmd)
	defer cancel()
	return rt.CheckNetworkList(ctx, list, conf)
}

func (po *podOptions) del(cmd *cobra.Command, rt *cni.Runtime, list *cni.NetworkConfigList, conf *cni.RuntimeConf) error {
	ctx, cancel := po.global.context(cmd)
	defer cancel()
	// DEL of an attachment uses the configuration it was added with,
	// when the cache has it: today's file may have changed since.
	if a, err := rt.CachedAttachment(list.Name, conf); err == nil && a != nil {
		if cached, err := a.CachedNetworkConfigList(); err == nil {
			list = cached
		}
	}
	return rt.DelNetworkList(ctx, list, conf)
}

// statusCommand is `pod status NETWORK [NETNS]`.
func (po *podOptions) statusCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "status NETWORK [NETNS]",
		Short: "Ask the network's plugins whether they are ready; with NETNS, print the cached attachment too",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := po.global.context(cmd)
			defer cancel()
			list, err := po.global.network(args[0])
			if err != nil {
				return err
			}
			rt := po.global.runtime()
			if err := rt.StatusNetworkList(ctx, list); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "network %q: ready\n", list.Name)
			if len(args) == 1 {
				return nil
			}
			return po.printCached(cmd, rt, list, netnsPath(args[1]))
		},
	}
}

// printCached prints the cached result of the attachment of the namespace
// at netns to list.
func (po *podOptions) printCached(cmd *cobra.Command, rt *cni.Runtime, list *cni.NetworkConfigList, netns string) error {
	conf, err := po.runtimeConf(netns)
	if err != nil {
		return err
	}
	a, err := rt.CachedAttachment(list.Name, conf)
	if err != nil {
		return err
	}
	if a == nil || a.Result == nil {
		return cni.Errorf(cni.CodeUnknownContainer, "no cached attachment of container %q interface %q to network %q", conf.ContainerID, conf.IfName, list.Name)
	}
	return printJSON(cmd, a.Result)
}

// runtimeConf builds the attachment's identity from flags and cnitool's
// environment variables (CNI_ARGS, CAP_ARGS).
func (po *podOptions) runtimeConf(netns string) (*cni.RuntimeConf, error) {
	id := po.containerID
	if id == "" {
		// cnitool's derivation, so that either tool can delete what the
		// other added, and del finds what add cached without a flag.
		abs, err := filepath.Abs(netns)
		if err != nil {
			return nil, err
		}
		id = fmt.Sprintf("cnitool-%x", sha512.Sum512([]byte(abs)))[:len("cnitool-")+20]
	}
	conf := &cni.RuntimeConf{ContainerID: id, NetNS: netns, IfName: po.ifName}
	if s := os.Getenv("CNI_ARGS"); s != "" {
		args, err := cni.ParseArgs(s)
		if err != nil {
			return nil, err
		}
		conf.Args = args
	}
	if s := os.Getenv("CAP_ARGS"); s != "" {
		if err := json.Unmarshal([]byte(s), &conf.CapabilityArgs); err != nil {
			return nil, cni.Errorf(cni.CodeInvalidEnvironment, "CAP_ARGS is not a JSON object: %v", err)
		}
	}
	return conf, nil
}

func printJSON(cmd *cobra.Command, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(cmd.OutOrStdout(), string(b))
	return err
}
