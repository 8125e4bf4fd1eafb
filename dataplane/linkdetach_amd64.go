package dataplane

import (
	"golang.org/x/sys/unix"
)

// deleterArea is the memory the amd64 deleter runs in: its message at
// the start, its stack at the end. Outside the Go heap, so nothing of
// this process's runtime moves or reuses it while the child runs.
const deleterArea = 16 << 10

// spawnDeleter starts the deleter as a process that shares this one's
// address space (CLONE_VM, without CLONE_VFORK: this process goes on at
// once) and runs rawCloneDeleteLink's child half on a stack of its own
// in a fresh mapping. It copies no page table, and nothing this process
// writes afterwards takes a copy-on-write fault, which a fork costs on
// the DEL path (the plugin's whole heap is written after it). The
// mapping is freed once the child is reaped; when this process exits
// first, the child's reference keeps the address space until its own
// exit.
func spawnDeleter(msg []byte, keep int) (int, func(), error) {
	area, err := unix.Mmap(-1, 0, deleterArea, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return 0, nil, err
	}
	copy(area, msg)
	free := func() { _ = unix.Munmap(area) }
	// The top of the mapping, 16-byte aligned (mmap returns pages).
	pid, errno := rawCloneDeleteLink(&area[len(area)-16], &area[0], uintptr(len(msg)), keep)
	if errno != 0 {
		free()
		return 0, nil, errno
	}
	return int(pid), free, nil
}

// rawCloneDeleteLink clones (CLONE_VM|SIGCHLD, the child's stack below
// stack). The child sends the n bytes at msg on a new rtnetlink socket,
// after closing every descriptor but keep (none when keep < 0), reads
// the answer and exits with its errno (0: deleted), or with childFailed
// and above for its own failures, as rawForkDeleteLink's does. In
// assembly: the child must not run a single Go instruction, which would
// check the stack bound of a goroutine whose stack it is not on.
//
//go:noescape
func rawCloneDeleteLink(stack, msg *byte, n uintptr, keep int) (pid uintptr, errno unix.Errno)
