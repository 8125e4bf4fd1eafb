package route

import (
	"fmt"
	"log/slog"

	"github.com/vishvananda/netlink"

	"github.com/podnet/podnet/dataplane"
)

// removeWireGuard deletes a podnet.wg left on the node when the agent
// runs with encryption off: a kernel device outlives the agent that
// made it, with its private key and peers, and with encryption turned
// off by a rollout nothing else would remove it (a userspace device
// ends with its agent). The name is podnet's own. Its routes go with
// it, and the reconcile that follows routes the other nodes' pods in
// the mode, as encryption none asks.
func removeWireGuard(h *netlink.Handle, log *slog.Logger) error {
	link, err := dataplane.LinkByName(h, WireGuardDevice)
	if err != nil || link == nil {
		return err
	}
	log.Info("encryption none: removing the WireGuard device left by encryption wireguard", "device", WireGuardDevice, "kind", link.Type())
	if err := h.LinkDel(link); err != nil && !dataplane.IsNotFound(err) {
		return fmt.Errorf("encryption none: delete link %s: %w", WireGuardDevice, err)
	}
	return nil
}
