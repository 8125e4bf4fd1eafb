package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/netplugin"
	"github.com/podnet/podnet/sandbox"
)

type runOptions struct {
	name      string
	namespace string
	network   string
	ports     []string
	verbose   bool
}

func newRunCommand(opts *globalOptions) *cobra.Command {
	ro := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run [flags] -- COMMAND [ARGS...]",
		Short: "Run a command in a new pod sandbox with its own network",
		Long: `run creates a pod sandbox (a network namespace), sets up its network through
the plugin manager as a kubelet would, runs COMMAND inside it with stdin,
stdout and stderr passed through, forwards SIGINT and SIGTERM to it, then
tears the network down, removes the sandbox and exits with COMMAND's status.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return ro.run(cmd, opts, args) },
	}
	f := cmd.Flags()
	f.StringVar(&ro.name, "name", "", "pod name (default: run-<random>)")
	f.StringVar(&ro.namespace, "namespace", "default", "pod namespace, passed to plugins as K8S_POD_NAMESPACE")
	f.StringVar(&ro.network, "network", "", "network name (default: the first network in the conf dir)")
	f.StringArrayVarP(&ro.ports, "publish", "p", nil, "map a host port: [HOSTIP:]HOSTPORT:CONTAINERPORT[/tcp|udp|sctp], repeatable")
	f.BoolVarP(&ro.verbose, "verbose", "v", false, "report the pod's addresses and set-up time on stderr")
	return cmd
}

// parsePortMapping reads [HOSTIP:]HOSTPORT:CONTAINERPORT[/PROTO].
func parsePortMapping(s string) (netplugin.PortMapping, error) {
	var m netplugin.PortMapping
	spec, proto, hasProto := strings.Cut(s, "/")
	m.Protocol = "tcp"
	if hasProto {
		m.Protocol = strings.ToLower(proto)
	}
	switch m.Protocol {
	case "tcp", "udp", "sctp":
	default:
		return m, fmt.Errorf("port mapping %q: protocol %q is not tcp, udp or sctp", s, proto)
	}
	i := strings.LastIndexByte(spec, ':')
	if i < 0 {
		return m, fmt.Errorf("port mapping %q: want HOSTPORT:CONTAINERPORT", s)
	}
	host, container := spec[:i], spec[i+1:]
	if j := strings.LastIndexByte(host, ':'); j >= 0 {
		m.HostIP = strings.Trim(host[:j], "[]")
		host = host[j+1:]
	}
	var err error
	if m.HostPort, err = parsePort(host); err != nil {
		return m, fmt.Errorf("port mapping %q: host port: %v", s, err)
	}
	if m.ContainerPort, err = parsePort(container); err != nil {
		return m, fmt.Errorf("port mapping %q: container port: %v", s, err)
	}
	return m, nil
}

func parsePort(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("%q is not a port number (1-65535)", s)
	}
	return n, nil
}

func (ro *runOptions) run(cmd *cobra.Command, opts *globalOptions, argv []string) error {
	podOpts := &netplugin.PodOptions{}
	for _, p := range ro.ports {
		m, err := parsePortMapping(p)
		if err != nil {
			return err
		}
		podOpts.PortMappings = append(podOpts.PortMappings, m)
	}
	name := ro.name
	if name == "" {
		name = sandbox.RandomName("run")
	}
	if err := sandbox.ValidateName(name); err != nil {
		return err
	}

	env, err := opts.podEnv(ro.network, true)
	if err != nil {
		return err
	}
	defer env.close()

	sb, err := env.store.Create(ro.namespace, name)
	if err != nil {
		return err
	}
	pod := netplugin.PodRef{Namespace: sb.Namespace, Name: sb.Name}
	// Tear-down must run even when a signal cancelled the command's
	// context: it gets its own deadline.
	teardown := func() error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), opts.timeout)
		defer cancel()
		return errors.Join(env.manager.TearDownPod(ctx, pod, sb.ID), env.store.Delete(sb.Name))
	}

	start := time.Now()
	ctx, cancel := opts.context(cmd)
	st, err := env.manager.SetUpPod(ctx, pod, sb.ID, podOpts)
	cancel()
	if err != nil {
		return errors.Join(err, teardown())
	}
	setup := time.Since(start)
	sb.Network = st.Network
	for _, ip := range st.IPs {
		sb.IPs = append(sb.IPs, ip.String())
	}
	if err := env.store.Save(sb); err != nil {
		return errors.Join(err, teardown())
	}
	if ro.verbose {
		fmt.Fprintf(cmd.ErrOrStderr(), "podnet: pod %s network %s ips %s set up in %s\n", sb.Name, st.Network, strings.Join(sb.IPs, ","), setup.Round(10*time.Microsecond))
	}

	status, runErr := runInNamespace(sb.NetNS, argv)
	if err := teardown(); err != nil {
		return errors.Join(runErr, err)
	}
	if runErr != nil {
		return runErr
	}
	if status != 0 {
		return exitCode(status)
	}
	return nil
}

// runInNamespace runs argv inside the network namespace with the standard
// streams passed through and SIGINT/SIGTERM forwarded, and returns its exit
// status (128+signal when a signal ended it, as shells report it).
func runInNamespace(nsPath string, argv []string) (int, error) {
	c := exec.Command(argv[0], argv[1:]...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	// The child is forked from the thread that netns.Do moved into the
	// namespace, so it starts there; the rest of podnet does not.
	if err := netns.Do(nsPath, c.Start); err != nil {
		return 0, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	for {
		select {
		case s := <-sigs:
			_ = c.Process.Signal(s)
		case err := <-done:
			if c.ProcessState == nil {
				return 0, err
			}
			if ws, ok := c.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				return 128 + int(ws.Signal()), nil
			}
			return c.ProcessState.ExitCode(), nil
		}
	}
}
