package dataplane

import (
	"encoding/binary"
	"fmt"
	"os"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// DeleteLinkEarly deletes the link called name and returns as soon as
// the kernel has unregistered it: gone from every lookup, with its
// addresses, routes and neighbours, and its name free. The deletion
// itself goes on for a while after that, waiting for RCU (rcu_barrier
// and the release of the device's references, tens of milliseconds on
// a busy machine); done reports its end. A caller can do its next steps
// in that time instead of waiting, as DEL does with the IPAM's release.
//
// The kernel announces the unregistration (RTM_DELLINK to the
// RTNLGRP_LINK group) from within the deletion, before the RCU waits; a
// socket subscribed beforehand sees it. h must not be used again until
// done has reported. A link that does not exist is deleted already. An
// error means the link was not deleted.
func DeleteLinkEarly(h *netlink.Handle, name string) (done <-chan error, err error) {
	link, gone, err := linkToDelete(h, name)
	if link == nil {
		return gone, err
	}
	return deleteLinkEarly(h, link, name)
}

// linkToDelete looks the link called name up for a deletion: nil and
// a done channel already answered when it does not exist.
func linkToDelete(h *netlink.Handle, name string) (netlink.Link, <-chan error, error) {
	link, err := LinkByName(h, name)
	if err != nil {
		return nil, nil, err
	}
	if link == nil {
		gone := make(chan error, 1)
		gone <- nil
		return nil, gone, nil
	}
	return link, nil, nil
}

// deleteLinkEarly is DeleteLinkEarly for a link looked up already.
func deleteLinkEarly(h *netlink.Handle, link netlink.Link, name string) (done <-chan error, err error) {
	res := make(chan error, 1)
	del := func() error {
		err := h.LinkDel(link)
		if err != nil && !IsNotFound(err) {
			return fmt.Errorf("delete link %s: %w", name, err)
		}
		return nil
	}
	w, err := linkWatch(link.Attrs().Index)
	if err != nil {
		// No early notice: wait for all of it, and report a failure
		// here, as the contract says, not through done.
		if err := del(); err != nil {
			return nil, err
		}
		res <- nil
		return res, nil
	}
	defer w.close()
	go func() { res <- del() }()
	select {
	case <-w.gone:
		return res, nil
	case err := <-res: // over, or failed, before the notice was read
		if err != nil {
			return nil, err
		}
		res <- nil
		return res, nil
	}
}

// linkWatch is watchUnregister; a test makes it fail.
var linkWatch = watchUnregister

// unregisterWatch waits for the RTM_DELLINK of one interface index.
type unregisterWatch struct {
	f    *os.File
	gone chan struct{}
}

// watchUnregister subscribes, in the calling thread's namespace, to
// link notifications, and reads them in the background until close.
func watchUnregister(index int) (*unregisterWatch, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("link watch socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: unix.RTMGRP_LINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("link watch bind: %w", err)
	}
	// Non-blocking and wrapped in an *os.File: reads go through the
	// runtime poller, so close interrupts a read in progress.
	w := &unregisterWatch{f: os.NewFile(uintptr(fd), "rtnetlink-link-watch"), gone: make(chan struct{})}
	go w.read(int32(index))
	return w, nil
}

func (w *unregisterWatch) read(index int32) {
	buf := make([]byte, 32<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			return // closed; or ENOBUFS, and the deletion's end reports instead
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			continue
		}
		for _, m := range msgs {
			if m.Header.Type == unix.RTM_DELLINK && len(m.Data) >= unix.SizeofIfInfomsg &&
				int32(binary.NativeEndian.Uint32(m.Data[4:8])) == index {
				close(w.gone)
				return
			}
		}
	}
}

func (w *unregisterWatch) close() { w.f.Close() }
