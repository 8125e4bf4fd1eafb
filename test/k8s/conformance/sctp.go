package conformance

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// KernelSCTP reports whether the kernel can open SCTP sockets, as the
// SCTP specs' pods will: nil if it can, the reason if not. Opening the
// socket makes the kernel load the sctp module where one is installed,
// as modprobe would; it sends nothing.
func KernelSCTP() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_SCTP)
	if err != nil {
		if errors.Is(err, unix.EPROTONOSUPPORT) {
			return fmt.Errorf("the kernel has no SCTP (socket: %w; no sctp module built in or loadable)", err)
		}
		return fmt.Errorf("SCTP socket: %w", err)
	}
	return unix.Close(fd)
}
