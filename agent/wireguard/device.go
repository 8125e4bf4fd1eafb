package wireguard

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/ipc"
	"golang.zx2c4.com/wireguard/tun"

	"github.com/podnet/podnet/agent/route"
)

// Implementations of the device, as Mode reports them.
const (
	Kernel    = "kernel"
	Userspace = "userspace"
)

// wgDevice is podnet.wg as this process holds it: nothing more than the
// mode for a kernel device (the kernel keeps it), the wireguard-go
// device and its UAPI socket for a userspace one.
type wgDevice struct {
	mode string
	dev  *device.Device
	uapi net.Listener
	sock string
	done chan struct{} // closed when the UAPI accept loop has ended
	// restoreProcs undoes limitProcs when the userspace device ends.
	restoreProcs func()
	// closed is set by close: a failed Setup closes, and so does the
	// agent's deferred Close after it.
	closed bool
}

// openDevice makes podnet.wg, or takes the one an earlier run left (a
// kernel device outlives the agent), with mtu. userspaceOK says whether
// wireguard-go may run here: only in a process that is in the node's
// network namespace, where its TUN device and UDP socket must be.
func openDevice(h *netlink.Handle, mtu int, userspaceOK bool, log *slog.Logger) (*wgDevice, error) {
	name := route.WireGuardDevice
	if l, err := h.LinkByName(name); err == nil {
		if l.Type() != "wireguard" {
			// Not a kernel device: a TUN device ends with its process, so
			// this is not podnet's, and not its to remove.
			return nil, fmt.Errorf("wireguard: a link %s of type %s is in the way", name, l.Type())
		}
		return &wgDevice{mode: Kernel}, setLink(h, name, mtu)
	}
	kerr := h.LinkAdd(&netlink.Wireguard{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: mtu}})
	if kerr == nil {
		return &wgDevice{mode: Kernel}, setLink(h, name, mtu)
	}
	if !userspaceOK {
		return nil, fmt.Errorf("wireguard: no kernel WireGuard (%v), and userspace WireGuard needs the agent inside the node's network namespace", kerr)
	}
	log.Info("no kernel WireGuard; running wireguard-go in the agent", "kernel_err", kerr)
	d, err := openUserspace(name, mtu, log)
	if err != nil {
		return nil, err
	}
	if err := setLink(h, name, mtu); err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

// openUserspace runs wireguard-go on a TUN device named name and serves
// its UAPI socket, through which wgctrl configures it.
func openUserspace(name string, mtu int, log *slog.Logger) (*wgDevice, error) {
	t, err := tun.CreateTUN(name, mtu)
	if err != nil {
		return nil, fmt.Errorf("wireguard: userspace: create TUN device %s: %w", name, err)
	}
	logger := &device.Logger{
		Verbosef: func(string, ...any) {},
		Errorf:   func(format string, args ...any) { log.Warn("wireguard-go: " + fmt.Sprintf(format, args...)) },
	}
	d := &wgDevice{mode: Userspace, dev: device.NewDevice(t, conn.NewDefaultBind(), logger), done: make(chan struct{}),
		restoreProcs: limitProcs(log)}
	f, err := ipc.UAPIOpen(name)
	if err == nil {
		d.uapi, err = ipc.UAPIListen(name, f)
	}
	if err != nil {
		d.dev.Close()
		d.restoreProcs()
		return nil, fmt.Errorf("wireguard: userspace: UAPI socket of %s: %w", name, err)
	}
	d.sock = filepath.Join("/var/run/wireguard", name+".sock")
	go func() {
		defer close(d.done)
		for {
			c, err := d.uapi.Accept()
			if err != nil {
				return
			}
			go d.dev.IpcHandle(c)
		}
	}()
	return d, nil
}

// setLink sets the device's MTU and brings it up.
func setLink(h *netlink.Handle, name string, mtu int) error {
	l, err := h.LinkByName(name)
	if err == nil && l.Attrs().MTU != mtu {
		err = h.LinkSetMTU(l, mtu)
	}
	if err == nil {
		err = h.LinkSetUp(l)
	}
	if err != nil {
		return fmt.Errorf("wireguard: set up %s (mtu %d): %w", name, mtu, err)
	}
	return nil
}

// close ends a userspace device: its socket, then wireguard-go, which
// closes the TUN device (the kernel removes it and its routes). A kernel
// device stays, and keeps encrypting while the agent restarts.
func (d *wgDevice) close() error {
	if d == nil || d.mode != Userspace || d.closed {
		return nil
	}
	d.closed = true
	var errs []error
	if d.uapi != nil {
		errs = append(errs, d.uapi.Close())
		<-d.done
		if err := os.Remove(d.sock); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	d.dev.Close()
	d.restoreProcs()
	return errors.Join(errs...)
}
