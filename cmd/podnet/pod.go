package main

import (
	"crypto/sha512"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
		po.verbCommand("add", "Attach a namespace to a network and print the result", po.add, outputJSON, outputText),
		po.verbCommand("check", "Check that an attachment is still as ADD left it", po.check, outputText, outputJSON),
		po.verbCommand("del", "Detach a namespace from a network (idempotent)", po.del, outputText, outputJSON),
		po.statusCommand(),
		newPodGCCommand(opts), newPodLsCommand(opts), newPodRmCommand(opts))
	return cmd
}

// attachmentVerb runs one verb on the attachment that NETWORK NETNS name
// and writes its outcome as output asks.
type attachmentVerb func(cmd *cobra.Command, rt *cni.Runtime, list *cni.NetworkConfigList, conf *cni.RuntimeConf, output string) error

// verbCommand is `pod <use> NETWORK NETNS`; formats are its -o values,
// the first the default.
func (po *podOptions) verbCommand(use, short string, run attachmentVerb, formats ...string) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:               use + " NETWORK NETNS",
		Short:             short,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: completeNetworkThenNetNS(po.global),
		RunE: func(cmd *cobra.Command, args []string) error {
			list, err := po.global.network(args[0])
			if err != nil {
				return err
			}
			conf, err := po.runtimeConf(netnsPath(args[1]))
			if err != nil {
				return err
			}
			return run(cmd, po.global.runtime(), list, conf, output)
		},
	}
	addOutputFlag(cmd, &output, formats...)
	return cmd
}

// attachmentReport is `pod check|del -o json`: the attachment the verb
// succeeded on (a failure is an error on stderr and exit status 1).
type attachmentReport struct {
	Verb        string `json:"verb"`
	Network     string `json:"network"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
	NetNS       string `json:"netns"`
	OK          bool   `json:"ok"`
}

// writeText prints nothing: check and del are silent on success, as
// cnitool is.
func (attachmentReport) writeText(io.Writer) error { return nil }

func attachmentDone(verb string, list *cni.NetworkConfigList, conf *cni.RuntimeConf) attachmentReport {
	return attachmentReport{Verb: verb, Network: list.Name, ContainerID: conf.ContainerID, IfName: conf.IfName, NetNS: conf.NetNS, OK: true}
}

// addResult is `pod add`'s output: the CNI result as the chain returned
// it (-o json, the default), or its interfaces and addresses in words.
type addResult struct{ *cni.Result }

func (r addResult) writeText(w io.Writer) error {
	for _, ip := range r.IPs {
		iface := "-"
		if ip.Interface != nil && *ip.Interface >= 0 && *ip.Interface < len(r.Interfaces) {
			iface = r.Interfaces[*ip.Interface].Name
		}
		gw := ""
		if ip.Gateway.IsValid() {
			gw = " gateway " + ip.Gateway.String()
		}
		if _, err := fmt.Fprintf(w, "%s %s%s\n", iface, ip.Address, gw); err != nil {
			return err
		}
	}
	return nil
}

func (po *podOptions) add(cmd *cobra.Command, rt *cni.Runtime, list *cni.NetworkConfigList, conf *cni.RuntimeConf, output string) error {
	ctx, cancel := po.global.context(cmd)
	defer cancel()
	res, err := rt.AddNetworkList(ctx, list, conf)
	if err != nil {
		return err
	}
	return writeOutput(cmd.OutOrStdout(), output, addResult{res})
}

func (po *podOptions) check(cmd *cobra.Command, rt *cni.Runtime, list *cni.NetworkConfigList, conf *cni.RuntimeConf, output string) error {
	ctx, cancel := po.global.context(cmd)
	defer cancel()
	if err := rt.CheckNetworkList(ctx, list, conf); err != nil {
		return err
	}
	return writeOutput(cmd.OutOrStdout(), output, attachmentDone("check", list, conf))
}

func (po *podOptions) del(cmd *cobra.Command, rt *cni.Runtime, list *cni.NetworkConfigList, conf *cni.RuntimeConf, output string) error {
	ctx, cancel := po.global.context(cmd)
	defer cancel()
	// DEL of an attachment uses the configuration it was added with,
	// when the cache has it: today's file may have changed since.
	name := list.Name
	if a, err := rt.CachedAttachment(list.Name, conf); err == nil && a != nil {
		if cached, err := a.CachedNetworkConfigList(); err == nil {
			list = cached
		}
	}
	if err := rt.DelNetworkList(ctx, list, conf); err != nil {
		return err
	}
	rep := attachmentDone("del", list, conf)
	rep.Network = name
	return writeOutput(cmd.OutOrStdout(), output, rep)
}

// podStatusReport is `pod status -o json`.
type podStatusReport struct {
	Network string `json:"network"`
	Ready   bool   `json:"ready"`
	// Error is why the network's plugins are not ready.
	Error string `json:"error,omitempty"`
	// Attachment is the cached result of NETNS's attachment, when asked.
	Attachment *cni.Result `json:"attachment,omitempty"`
}

func (r podStatusReport) writeText(w io.Writer) error {
	if !r.Ready {
		_, err := fmt.Fprintf(w, "network %q: not ready: %s\n", r.Network, r.Error)
		return err
	}
	fmt.Fprintf(w, "network %q: ready\n", r.Network)
	if r.Attachment == nil {
		return nil
	}
	return writeJSON(w, r.Attachment)
}

// statusCommand is `pod status NETWORK [NETNS]`.
func (po *podOptions) statusCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:               "status NETWORK [NETNS]",
		Short:             "Ask the network's plugins whether they are ready; with NETNS, print the cached attachment too",
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: completeNetworkThenNetNS(po.global),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := po.global.context(cmd)
			defer cancel()
			list, err := po.global.network(args[0])
			if err != nil {
				return err
			}
			rt := po.global.runtime()
			rep := podStatusReport{Network: list.Name, Ready: true}
			if err := rt.StatusNetworkList(ctx, list); err != nil {
				if output != outputJSON {
					return err
				}
				rep.Ready, rep.Error = false, err.Error()
				return errors.Join(writeJSON(cmd.OutOrStdout(), rep), exitCode(1))
			}
			if len(args) == 2 {
				if rep.Attachment, err = po.cached(rt, list, netnsPath(args[1])); err != nil {
					return err
				}
			}
			return writeOutput(cmd.OutOrStdout(), output, rep)
		},
	}
	addOutputFlag(cmd, &output, outputText, outputJSON)
	return cmd
}

// cached is the cached result of the attachment of the namespace at
// netns to list.
func (po *podOptions) cached(rt *cni.Runtime, list *cni.NetworkConfigList, netns string) (*cni.Result, error) {
	conf, err := po.runtimeConf(netns)
	if err != nil {
		return nil, err
	}
	a, err := rt.CachedAttachment(list.Name, conf)
	if err != nil {
		return nil, err
	}
	if a == nil || a.Result == nil {
		return nil, cni.Errorf(cni.CodeUnknownContainer, "no cached attachment of container %q interface %q to network %q", conf.ContainerID, conf.IfName, list.Name)
	}
	return a.Result, nil
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
