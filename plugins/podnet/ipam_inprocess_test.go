package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/bolt"
)

// TestInProcessPodnetIPAM: with ipam type podnet-ipam, the plugin
// allocates in process (no IPAM binary exists in the plugin directory),
// routed pods get /32s, bridged pods the pool's length and a per-node
// gateway, pods reach each other, and DEL leaves no allocation.
func TestInProcessPodnetIPAM(t *testing.T) {
	for _, tc := range []struct{ mode, wantBits string }{
		{`"mode":"routed"`, "/32"},
		{`"mode":"bridge","bridge":"pnbr1"`, "/16"},
	} {
		t.Run(strings.Split(tc.mode, `"`)[3], func(t *testing.T) {
			e := newEnv(t, false)
			db := filepath.Join(t.TempDir(), "ipam.db")
			conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"pnipam","type":"podnet",%s,
				"ipam":{"type":"podnet-ipam","store":"bolt:%s","node":"node1","pools":[{"name":"p4","cidr":"10.107.0.0/16"}]}}`, tc.mode, db)
			a, b := e.newPod("ipam-a"), e.newPod("ipam-b")
			e.add(conf, a)
			e.add(conf, b)
			if got := a.res.IPs[0].Address.String(); !strings.HasPrefix(got, "10.107.") || !strings.HasSuffix(got, tc.wantBits) {
				t.Fatalf("address %s, want 10.107.x.x%s", got, tc.wantBits)
			}
			if src, err := echo(t, a.ns, b.ns, b.addr(true)); err != nil || src != a.addr(true) {
				t.Errorf("pod a -> pod b: %s %v", src, err)
			}
			again, err := e.run("ADD", conf, a)
			if err != nil || strings.TrimSpace(string(again)) != string(a.res.Bytes()) {
				t.Errorf("repeated ADD: %s %v", again, err)
			}
			e.del(conf, a)
			e.del(conf, b)
			e.del(conf, a)
			e.requireClean()

			st, err := bolt.Open(context.Background(), bolt.Options{Path: db})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			rep, err := ipam.New(st, ipam.Config{}).Check(context.Background(), ipam.CheckOptions{Live: func(_, h string) bool { return strings.Contains(h, ".gateway.") }})
			if err != nil || !rep.Clean() {
				t.Errorf("store after DEL: %+v %v", rep, err)
			}
		})
	}
}
