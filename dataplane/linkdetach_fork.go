//go:build linux && !amd64

package dataplane

import (
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// spawnDeleter forks: the child shares nothing with this process but
// copies of its memory and descriptors (amd64 has a cheaper way,
// linkdetach_amd64.go).
func spawnDeleter(msg []byte, keep int) (int, func(), error) {
	pid, e := rawForkDeleteLink(&msg[0], uintptr(len(msg)), keep)
	runtime.KeepAlive(msg)
	if e != 0 {
		return 0, nil, e
	}
	return int(pid), func() {}, nil
}

// rawForkDeleteLink forks; the child sends msg on a new rtnetlink
// socket, reads the answer and exits with its errno (0: deleted). The
// child has one thread and a copy of this process's memory, whose
// runtime it must not enter: it runs nothing but raw system calls on
// this stack (nosplit, no allocation, no race instrumentation), as
// package syscall's child between fork and exec does.
//
//go:nosplit
//go:norace
func rawForkDeleteLink(msg *byte, n uintptr, keep int) (pid uintptr, errno syscall.Errno) {
	var ack [64]byte
	pid, _, errno = syscall.RawSyscall6(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if errno != 0 || pid != 0 {
		return pid, errno
	}
	// The child.
	const all = 0xffffffff
	var e syscall.Errno
	if keep < 0 {
		_, _, e = syscall.RawSyscall(unix.SYS_CLOSE_RANGE, 0, all, 0)
	} else {
		if keep > 0 {
			_, _, e = syscall.RawSyscall(unix.SYS_CLOSE_RANGE, 0, uintptr(keep-1), 0)
		}
		if e == 0 {
			_, _, e = syscall.RawSyscall(unix.SYS_CLOSE_RANGE, uintptr(keep+1), all, 0)
		}
	}
	if e != 0 { // no close_range (before Linux 5.9): one by one
		for fd := 0; fd < 4096; fd++ {
			if fd != keep {
				syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(fd), 0, 0)
			}
		}
	}
	code := uintptr(childFailed)
	fd, _, e := syscall.RawSyscall(syscall.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if e == 0 {
		code++
		if _, _, e = syscall.RawSyscall6(syscall.SYS_SENDTO, fd, uintptr(unsafe.Pointer(msg)), n, 0, 0, 0); e == 0 {
			code++
			r, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&ack[0])), uintptr(len(ack)), 0, 0, 0)
			// struct nlmsgerr after the header: its error is 0 or -errno.
			if e == 0 && r >= unix.NLMSG_HDRLEN+4 && *(*uint16)(unsafe.Pointer(&ack[4])) == unix.NLMSG_ERROR {
				if errv := -*(*int32)(unsafe.Pointer(&ack[unix.NLMSG_HDRLEN])); errv >= 0 && errv < childFailed {
					code = uintptr(errv)
				}
			}
		}
	}
	for {
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, code, 0, 0)
	}
}
