package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/podnet/podnet/flowui"
)

// uiOptions are `podnet ui`'s flags.
type uiOptions struct {
	listen string
	agents []string
	// kube reads the cluster's agent pods through the API server when
	// no --agent is given (podnet flows's flags of the same names).
	kube flowsCommandOptions
}

// newUIFlowSource picks where the page's records come from. It is the
// seam for the cluster's agents read through the API server (a
// kubeconfig): that source plugs in here, next to --agent's URLs. The
// string says in the page what the source is.
var newUIFlowSource = func(ctx context.Context, o *uiOptions) (flowui.Source, string, error) {
	if len(o.agents) == 0 {
		return kubeUIFlowSource(ctx, o)
	}
	src, err := flowui.NewAgentSource(o.agents)
	if err != nil {
		return nil, "", fmt.Errorf("--agent: %w", err)
	}
	label := "agent " + o.agents[0]
	if len(o.agents) > 1 {
		label = fmt.Sprintf("%d agents", len(o.agents))
	}
	return src, label, nil
}

// kubeUIFlowSource reads every running agent pod through the API
// server's pod proxy, as podnet flows does, with the kubeconfig's
// authenticated client. The agent pods are listed once, at start.
func kubeUIFlowSource(ctx context.Context, o *uiOptions) (flowui.Source, string, error) {
	o.kube.port, o.kube.timeout = 9603, 10*time.Second
	srcs, err := o.kube.sources(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("%w (or name agents with --agent)", err)
	}
	src := &flowui.AgentSource{}
	for _, s := range srcs {
		if s.err != nil {
			fmt.Fprintf(os.Stderr, "podnet ui: %s: %v\n", s.name, s.err)
			continue
		}
		src.URLs = append(src.URLs, s.client.URL)
		src.Client = s.client.HTTP
	}
	if len(src.URLs) == 0 {
		return nil, "", errors.New("no agent pod is running")
	}
	return src, fmt.Sprintf("%d agents through the API server", len(src.URLs)), nil
}

func newUICommand() *cobra.Command {
	o := &uiOptions{}
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve a page of the live flows and a map of who talks to whom, on 127.0.0.1",
		Long: `podnet ui serves a web page on a loopback address: the agents' flows as a live
table with filters (namespace, pod, verdict, protocol, port), and a map of
namespaces and pods whose edges are coloured by verdict. The page loads
nothing from elsewhere; its /api/flows answers as the agents' /flows does
(NDJSON, the same query parameters). It ends on SIGINT.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runUI(cmd.Context(), cmd, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "127.0.0.1:7380", "address to serve the page on: a loopback address (127.0.0.0/8 or [::1]) and port")
	f.StringArrayVar(&o.agents, "agent", nil, "base URL of an agent's flows API, e.g. http://127.0.0.1:9603 (repeatable); without it, every agent pod through the API server")
	f.StringVar(&o.kube.kubeconfig, "kubeconfig", "", "kubeconfig file (default: kubectl's, else in-cluster)")
	f.StringVar(&o.kube.agentNamespace, "agent-namespace", "kube-system", "namespace of the agent DaemonSet's pods")
	f.StringVar(&o.kube.selector, "selector", "app.kubernetes.io/name=podnet", "label selector of the agent pods")
	return cmd
}

func runUI(ctx context.Context, cmd *cobra.Command, o *uiOptions) error {
	addr, err := flowui.LoopbackAddr(o.listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", o.listen, err)
	}
	src, label, err := newUIFlowSource(ctx, o)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr.String())
	if err != nil {
		return fmt.Errorf("--listen %q: %w", o.listen, err)
	}
	srv := &http.Server{
		Handler:           flowui.New(src, label),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	url := "http://" + ln.Addr().String() + "/"
	fmt.Fprintf(cmd.OutOrStdout(), "podnet ui: serving %s (flows from %s); Ctrl-C ends it\n", url, strings.TrimPrefix(label, "agent "))
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serving %s: %w", url, err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// The follow streams end with ctx (BaseContext); Shutdown waits for
	// them to return.
	if err := srv.Shutdown(shutdown); err != nil {
		_ = srv.Close()
	}
	return nil
}
