//go:build podnetfault

package bolt

import (
	"errors"
	"os"
)

// In binaries built with -tags podnetfault only: PODNET_FAULT_COMMIT=MSG
// fails every commit whose writes were acknowledged before it (AckApplied)
// with MSG, as a disk filling up during the commit would.
func init() {
	if msg := os.Getenv("PODNET_FAULT_COMMIT"); msg != "" {
		failAfterAck = func() error { return errors.New(msg) }
	}
}
