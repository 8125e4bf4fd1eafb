package ipamcni

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/bolt"
)

const faultChildEnv = "PODNET_IPAMCNI_FAULT_CHILD"

// killAtCreate is a store that SIGKILLs its process at the second step
// of a block claim (the block's create, after the index's pending entry),
// before that write reaches the store.
type killAtCreate struct{ ipam.Store }

func (k killAtCreate) Write(ctx context.Context, w ipam.Write) (int64, error) {
	if strings.Contains(w.Key, "/ipam/blocks/") && w.ModRevision == 0 {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
	return k.Store.Write(ctx, w)
}

// TestFaultChildClaim is the process that gets killed; it runs only when
// TestKilledBetweenClaimAndConfirm starts it.
func TestFaultChildClaim(t *testing.T) {
	db := os.Getenv(faultChildEnv)
	if db == "" {
		t.Skip("run by TestKilledBetweenClaimAndConfirm")
	}
	st, err := bolt.Open(context.Background(), bolt.Options{Path: db})
	if err != nil {
		t.Fatal(err)
	}
	a := ipam.New(killAtCreate{st}, ipam.Config{})
	if err := a.PutPool(context.Background(), ipam.Pool{Name: "v4", CIDR: netip.MustParsePrefix("10.105.0.0/16")}); err != nil {
		t.Fatal(err)
	}
	_, err = a.AutoAssign(context.Background(), ipam.AutoAssignArgs{Handle: "net1.dead", Node: "n1", Num4: 1})
	t.Fatalf("AutoAssign returned (%v) instead of dying at the confirmation", err)
}

// TestKilledBetweenClaimAndConfirm: a plugin process killed between
// the intent of a claim (the index's pending entry) and the block's create
// leaves the pending entry alone; Check reports it once it is older than
// the claim timeout, and the node's next ADD finishes the claim and
// allocates from that block.
func TestKilledBetweenClaimAndConfirm(t *testing.T) {
	db := filepath.Join(t.TempDir(), "ipam.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestFaultChildClaim$", "-test.count=1")
	cmd.Env = append(os.Environ(), faultChildEnv+"="+db)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child: %v, want killed by SIGKILL: %s", err, out)
	}

	ctx := context.Background()
	st, err := bolt.Open(ctx, bolt.Options{Path: db})
	if err != nil {
		t.Fatal(err)
	}
	keys := ipam.Keys{}
	kv, err := st.Get(ctx, keys.Node("n1"))
	var x ipam.NodeIndex
	if err == nil {
		err = json.Unmarshal(kv.Value, &x)
	}
	if err != nil || len(x.Blocks) != 1 || x.Blocks[0].State != ipam.AffinityPending {
		t.Fatalf("index the killed claim left: %+v %v", x, err)
	}
	pending := x.Blocks[0].CIDR
	if blocks, _ := st.List(ctx, keys.Blocks()); len(blocks) != 0 {
		t.Fatalf("blocks the killed claim left: %v", blocks)
	}
	later := func() time.Time { return time.Now().Add(time.Hour) }
	a := ipam.New(st, ipam.Config{Now: later})
	rep, err := a.Check(ctx, ipam.CheckOptions{})
	if err != nil || len(rep.AffinityMismatches) != 1 {
		t.Fatalf("Check after the kill: %+v %v", rep, err)
	}
	st.Close()

	p := open(t, conf(t, db, ""), [][2]string{{"K8S_POD_NAMESPACE", "ns"}, {"K8S_POD_NAME", "web"}})
	res, err := p.AddAttachment(ctx, PodInterface{ContainerID: "next", IfName: "eth0", Args: [][2]string{{"K8S_POD_NAMESPACE", "ns"}, {"K8S_POD_NAME", "web"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.IPs[0].Address.Addr(); !pending.Contains(got) {
		t.Errorf("next ADD got %s, want an address of the repaired block %s", got, pending)
	}
	rep, err = p.Allocator().CheckWithEndpoints(ctx)
	if err != nil || !rep.Clean() {
		t.Fatalf("Check after the next ADD: %+v %v", rep, err)
	}
}
