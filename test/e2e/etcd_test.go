package e2e

import (
	"os"
	"testing"

	"github.com/podnet/podnet/test/e2e/e2eetcd"
)

// The test binary doubles as the etcd helper (e2eetcd.MaybeRunHelper).
func TestMain(m *testing.M) {
	e2eetcd.MaybeRunHelper()
	os.Exit(m.Run())
}
