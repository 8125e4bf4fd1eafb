package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/podnet/podnet/agent/clusterstate"
	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/test/e2e/e2enet"
)

// checkNewPeer: both nodes' keys are taken out of their records (each
// drops the other's peer, its pods' traffic to the other refused) and
// put back in one transaction, as when encryption is turned on on both
// at once: each adds the other as a new peer within a moment of the
// other, the case where a first handshake is refused (the other has not
// added this one yet) or two cross (both sent one), and WireGuard on
// its own retries only after 5 s. Under UDP probes every 2 ms (both
// ways, then each way alone) the time from the keys' return to the
// first answered probe is logged as "new peer reachable after"; it must
// stay well under that retry (the lower key's side restarts its
// handshakes until the other answers). Nothing leaves in the clear
// meanwhile (the reader on n1's switch port).
func checkNewPeer(t *testing.T, c *cluster, cap *capture, src, dst *e2enet.Pod, payload []byte, all []*e2enet.Node) {
	t.Helper()
	nodes := []*e2enet.Node{src.Node, dst.Node}
	type rec struct {
		key   string
		orig  []byte
		lease clientv3.LeaseID
	}
	var recs []rec
	for _, n := range nodes {
		key := clusterstate.NodeKey(ipam.DefaultPrefix, n.Name)
		got, err := c.Client.Get(t.Context(), key)
		if err != nil || len(got.Kvs) != 1 {
			t.Fatalf("get %s: %v", key, err)
		}
		recs = append(recs, rec{key, got.Kvs[0].Value, clientv3.LeaseID(got.Kvs[0].Lease)})
	}
	put := func(withKey bool) {
		var ops []clientv3.Op
		for _, r := range recs {
			v := r.orig
			if !withKey {
				var nr clusterstate.NodeRecord
				if err := json.Unmarshal(r.orig, &nr); err != nil {
					t.Fatal(err)
				}
				nr.WireGuardKey = ""
				v, _ = json.Marshal(nr)
			}
			ops = append(ops, clientv3.OpPut(r.key, string(v), clientv3.WithLease(r.lease)))
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		if _, err := c.Client.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	defer put(true) // the keys back even when a round fails
	for _, ways := range []string{"both ways", "forward", "back", "both ways"} {
		put(false)
		waitUnreachable(t, c, src.Node, dst.Node)
		waitUnreachable(t, c, dst.Node, src.Node)
		cap.take()
		var ps []*probes
		if ways != "back" {
			ps = append(ps, startProbes(t, src, dst, dst.IP, payload))
		}
		if ways != "forward" {
			ps = append(ps, startProbes(t, dst, src, src.IP, payload))
		}
		time.Sleep(200 * time.Millisecond)
		start := time.Now()
		put(true)
		deadline := start.Add(15 * time.Second)
		for !allAnswered(ps, start) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		var got []string
		worst := time.Duration(0)
		for _, p := range ps {
			r := p.stop()
			first := time.Duration(-1)
			for _, a := range r.answers {
				if a.After(start) {
					first = a.Sub(start)
					break
				}
			}
			if first < 0 {
				t.Errorf("%s: no probe answered in 15 s after the keys came back", r.name)
				first = 15 * time.Second
			}
			worst = max(worst, first)
			got = append(got, fmt.Sprintf("%s %v", r.name, first.Round(time.Millisecond)))
		}
		if found, clearPods, other := inspect(cap.take(), payload, c, all); found != 0 || clearPods != 0 || len(other) != 0 {
			t.Errorf("%s: payload found %d times, %d frames with pod addresses, between nodes not WireGuard: %v", ways, found, clearPods, other)
		}
		t.Logf("new peer reachable after %v (%s; from both keys back in the records to the first answered probe: %s)",
			worst.Round(time.Millisecond), ways, strings.Join(got, ", "))
		if worst > 3*time.Second {
			t.Errorf("%s: new peer reachable after %v; want well under a handshake retry's 5 s", ways, worst)
		}
	}
}

// allAnswered says whether each of ps has had an answer after start.
func allAnswered(ps []*probes, start time.Time) bool {
	for _, p := range ps {
		p.mu.Lock()
		ok := len(p.answers) > 0 && p.answers[len(p.answers)-1].After(start)
		p.mu.Unlock()
		if !ok {
			return false
		}
	}
	return true
}
