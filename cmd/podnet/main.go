package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/podnet/podnet/ipamcni"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCommand()
	if err := root.ExecuteContext(ctx); err != nil {
		var exit exitCode
		if errors.As(err, &exit) {
			os.Exit(int(exit))
		}
		fmt.Fprintf(os.Stderr, "podnet: %v\n", err)
		// ipamcni.CodeOf also gives the allocator's errors (podnet ipam)
		// the code a plugin would have answered with.
		if code := ipamcni.CodeOf(err); code != 0 {
			fmt.Fprintf(os.Stderr, "podnet: CNI error code %d\n", code)
		}
		os.Exit(1)
	}
}

// exitCode makes a command exit with a status without printing an error
// (podnet run passes on its command's status).
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "podnet",
		Short:         "Pod networking for container runtimes",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newConnectivityCommand(), newVersionCmd())
	opts := &globalOptions{}
	opts.register(root)
	root.AddCommand(newNetCommand(opts), newPodCommand(opts), newRunCommand(opts), newStatusCommand(opts), newDiagCommand(), newBenchCommand(opts), newInstallCommand(opts), newIPAMCommand(opts), newAgentCommand(opts), newPolicyCommand(opts), newFlowsCommand(), newUICommand(), newUninstallCommand(), newWireGuardCommand())
	registerFlagValues(root, opts)
	return root
}
