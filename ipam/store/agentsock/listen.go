package agentsock

import (
	"fmt"
	"net"

	"github.com/podnet/podnet/internal/unixsock"
)

// Listen creates the unix socket at path, mode 0600, replacing a stale
// one (unixsock.Listen: bound under a temporary name, made 0600 and
// renamed into place, so no client ever finds it with other permissions
// or half made). Closing the listener removes path, unless another
// server has replaced the socket since.
func Listen(path string) (net.Listener, error) {
	l, err := unixsock.Listen(path)
	if err != nil {
		return nil, fmt.Errorf("agent store %w", err)
	}
	return l, nil
}
