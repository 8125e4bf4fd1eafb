package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"golang.zx2c4.com/wireguard/wgctrl"

	"github.com/podnet/podnet/agent/route"
	"github.com/podnet/podnet/agent/wireguard"
)

// newWireGuardCommand is the node's WireGuard encryption, run on the
// node (in a Kubernetes cluster in the node's agent pod, which has the
// node's /var/lib/podnet and its network).
func newWireGuardCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "wireguard", Short: "The node's WireGuard encryption between nodes (docs/encryption.md)"}
	var keyFile string
	var wait time.Duration
	var output string
	rotate := &cobra.Command{
		Use:   "rotate-key",
		Short: "Give the node a new WireGuard key pair, without restarting its agent",
		Long: `rotate-key writes a new private key over the node's key file (mode 0600,
atomically) and prints the new public key; the private key is never
printed. The running agent reads the file every second: it publishes the
new public key in the node's record, then sets the key on podnet.wg once
the datastore has it, and the peers take the new key as they see it.
Nothing is sent in the clear meanwhile; traffic to the node's pods
pauses for about as long as the peers take to see the record.

With --wait (the default) the command waits until podnet.wg in this
network namespace has the new public key.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, err := wireguard.RotateKey(keyFile)
			if err != nil {
				return err
			}
			rep := rotateReport{PublicKey: key.PublicKey().String(), KeyFile: keyFile}
			if output == outputText {
				fmt.Fprintln(cmd.OutOrStdout(), rep.PublicKey)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "podnet wireguard: new key written to %s; the agent publishes its public key, then sets it on %s\n", keyFile, route.WireGuardDevice)
			if wait > 0 {
				took, err := waitDeviceKey(cmd.Context(), rep.PublicKey, wait)
				if err != nil {
					err = fmt.Errorf("the key file has the new key (the agent's next start uses it), but %w", err)
					rep.Error = err.Error()
					if output == outputJSON {
						return errors.Join(writeJSON(cmd.OutOrStdout(), rep), err)
					}
					return err
				}
				rep.DeviceHasKey, rep.TookMs = true, took.Milliseconds()
				fmt.Fprintf(cmd.ErrOrStderr(), "podnet wireguard: %s runs the new key (%v after it was written)\n", route.WireGuardDevice, took.Round(time.Millisecond))
			}
			if output == outputJSON {
				return writeJSON(cmd.OutOrStdout(), rep)
			}
			return nil
		},
	}
	addOutputFlag(rotate, &output, outputText, outputJSON)
	rotate.Flags().StringVar(&keyFile, "key-file", wireguard.DefaultKeyFile, "the node's private key file: the agent's --wireguard-key-file")
	rotate.Flags().DurationVar(&wait, "wait", 30*time.Second, "how long to wait for podnet.wg to take the new key; 0: do not wait")
	cmd.AddCommand(rotate)
	return cmd
}

// rotateReport is `wireguard rotate-key -o json`; text prints the public
// key alone. The private key is never printed.
type rotateReport struct {
	PublicKey string `json:"publicKey"`
	KeyFile   string `json:"keyFile"`
	// DeviceHasKey: podnet.wg runs the new key (--wait), TookMs after it
	// was written.
	DeviceHasKey bool  `json:"deviceHasKey"`
	TookMs       int64 `json:"tookMs,omitempty"`
	// Error is why --wait gave up; the key file has the new key anyway.
	Error string `json:"error,omitempty"`
}

// waitDeviceKey waits until podnet.wg's public key is pub, and says how
// long that took.
func waitDeviceKey(ctx context.Context, pub string, wait time.Duration) (time.Duration, error) {
	c, err := wgctrl.New()
	if err != nil {
		return 0, fmt.Errorf("cannot reach WireGuard devices: %w", err)
	}
	defer c.Close()
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	var last error
	for {
		dev, err := c.Device(route.WireGuardDevice)
		switch {
		case err != nil:
			last = err
		case dev.PublicKey.String() == pub:
			return time.Since(start), nil
		default:
			last = fmt.Errorf("it has public key %s", dev.PublicKey)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%s does not have it after %v (%v): is the agent running here with --encryption=wireguard and this key file?", route.WireGuardDevice, wait, last)
		case <-t.C:
		}
	}
}
