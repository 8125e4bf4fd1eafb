package portmap

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// procSys is where sysctls are; a variable for tests.
var procSys = "/proc/sys"

// EnableRouteLocalnet sets net.ipv4.conf.<ifname>.route_localnet=1 on
// each interface that exists. 127.0.0.1:hostPort from the host is
// translated to the container's address but keeps its 127.0.0.1 source
// until postrouting; without route_localnet on the outgoing interface
// the kernel drops such a packet as martian before SNAT can rewrite it.
// The table's input chain drops what route_localnet would otherwise let
// in (packets for 127.0.0.0/8 arriving from outside).
//
// An interface that is not in this namespace is skipped: prevResult may
// name host-side interfaces that another plugin put elsewhere.
func EnableRouteLocalnet(ifnames []string) error {
	for _, name := range ifnames {
		if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
			continue
		}
		p := filepath.Join(procSys, "net/ipv4/conf", name, "route_localnet")
		cur, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("portmap: read %s: %w", p, err)
		}
		if string(bytes.TrimSpace(cur)) == "1" {
			continue
		}
		if err := os.WriteFile(p, []byte("1"), 0o644); err != nil {
			return fmt.Errorf("portmap: set %s: %w", p, err)
		}
	}
	return nil
}
