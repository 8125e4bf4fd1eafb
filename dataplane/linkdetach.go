package dataplane

import (
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// DeleteLinkDetached deletes the link called name, as DeleteLinkEarly
// does, but from a child process of its own: unregistered reports once
// the kernel has unregistered the link (gone from every lookup, with its
// addresses, routes and neighbours, and its name free), and the rest of
// the deletion, the kernel's wait for RCU callbacks before the device is
// freed (rcu_barrier, a whole grace period: ~13 ms here, the larger part
// of a CNI DEL), goes on in the child, which exits when it is over.
// Nothing a caller can observe waits for it, but a system call in
// progress holds its process's exit back, so done in the caller's own
// process it would hold the caller's exit (and a CNI runtime waits for
// that).
//
// keep is a descriptor the child holds open until then (or -1): the
// caller's nftables socket, whose last close would otherwise wait for
// the grace period of the caller's element deletions (the kernel
// flushes their deferred work when an nftables socket is released). The
// child closes every other descriptor it inherited before it does
// anything else, so no pipe of the caller's parent and no lock stays
// held by it.
//
// The child makes raw system calls only (a socket, the RTM_DELLINK,
// reading the answer, exit), with every signal blocked: on amd64 a
// process sharing this one's memory and running on a stack of its own
// (no page table copied, no copy-on-write fault after it), elsewhere a
// fork. When it cannot be started the link is deleted as
// DeleteLinkEarly does and unregistered reports in the same way. The
// link is deleted in the calling thread's network namespace, which must
// be h's. A link that does not exist is deleted already. An error,
// returned or reported, means the link was not deleted.
func DeleteLinkDetached(h *netlink.Handle, name string, keep int) (unregistered <-chan error, err error) {
	link, gone, err := linkToDelete(h, name)
	if link == nil {
		return gone, err
	}
	index := link.Attrs().Index
	w, err := linkWatch(index)
	if err != nil {
		return deleteLinkEarly(h, link, name)
	}
	pid, free, err := forkDeleteLink(index, keep)
	if err != nil {
		w.close()
		return deleteLinkEarly(h, link, name)
	}
	res := make(chan error, 1)
	exited := make(chan error, 1)
	go func() { // reaps the child, if this process outlives it
		err := waitDeleteLink(pid)
		free()
		exited <- err
	}()
	go func() {
		defer w.close()
		select {
		case <-w.gone:
			res <- nil
		case err := <-exited:
			if err == nil || errors.Is(err, unix.ENODEV) {
				res <- nil
				return
			}
			// The child could not delete it: try here, where the
			// kernel's answer comes back to the caller.
			if err := h.LinkDel(link); err != nil && !IsNotFound(err) {
				res <- fmt.Errorf("delete link %s: %w", name, err)
				return
			}
			res <- nil
		}
	}()
	return res, nil
}

// waitDeleteLink waits for the child and returns the kernel's answer
// to its RTM_DELLINK (the exit status is the errno).
func waitDeleteLink(pid int) error {
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("wait for the link's deleter: %w", err)
		}
		break
	}
	switch {
	case ws.Signaled():
		return fmt.Errorf("the link's deleter ended by %v", ws.Signal())
	case ws.ExitStatus() >= childFailed:
		return fmt.Errorf("the link's deleter failed (status %d)", ws.ExitStatus())
	case ws.ExitStatus() != 0:
		return syscall.Errno(ws.ExitStatus())
	}
	return nil
}

// childFailed and above are the child's own failures (no socket, the
// request not sent, no answer read); below, an errno from the kernel.
const childFailed = 250

// forkDeleteLink starts the child that deletes link index. It
// returns the child's pid and a function that frees what the child used,
// to be called once the child is reaped.
func forkDeleteLink(index, keep int) (int, func(), error) {
	// struct nlmsghdr + struct ifinfomsg: RTM_DELLINK by index.
	var msg [unix.NLMSG_HDRLEN + unix.SizeofIfInfomsg]byte
	hdr := (*unix.NlMsghdr)(unsafe.Pointer(&msg[0]))
	hdr.Len = uint32(len(msg))
	hdr.Type = unix.RTM_DELLINK
	hdr.Flags = unix.NLM_F_REQUEST | unix.NLM_F_ACK
	hdr.Seq = 1
	ifi := (*unix.IfInfomsg)(unsafe.Pointer(&msg[unix.NLMSG_HDRLEN]))
	ifi.Family = unix.AF_UNSPEC
	ifi.Index = int32(index)

	// Signals blocked across the clone, so the child never runs a Go
	// signal handler (it has no runtime to run one with); the child
	// keeps them blocked. The thread stays this goroutine's meanwhile.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	all, old := ^uint64(0), uint64(0)
	if _, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&all)), uintptr(unsafe.Pointer(&old)), 8, 0, 0); e != 0 {
		return 0, nil, fmt.Errorf("block signals: %w", e)
	}
	pid, free, err := spawnDeleter(msg[:], keep)
	syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&old)), 0, 8, 0, 0)
	if err != nil {
		return 0, nil, fmt.Errorf("start the link's deleter: %w", err)
	}
	return pid, free, nil
}
