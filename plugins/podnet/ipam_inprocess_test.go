package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podnet/podnet/cni"
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
			boltClean(t, db)
		})
	}
}

// TestInProcessCommitFails: the allocation is acknowledged before its
// commit, which then fails. On a new store that shows during the IPAM's
// own work (its next read waits for the commit); on a store in use, only
// when ADD waits for the commit before printing the result, with the pod
// wired meanwhile. Either way ADD must report the failure, not the
// address, and leave nothing behind: no link, route, nftables element or
// allocation.
func TestInProcessCommitFails(t *testing.T) {
	for _, warm := range []bool{false, true} {
		t.Run(map[bool]string{false: "new-store", true: "store-in-use"}[warm], func(t *testing.T) {
			e := newEnv(t, true)
			db := filepath.Join(t.TempDir(), "ipam.db")
			conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"pnipam","type":"podnet","ipMasq":true,
				"ipam":{"type":"podnet-ipam","store":"bolt:%s","node":"node1","pools":[{"name":"p4","cidr":"10.107.0.0/16"}]}}`, db)
			if warm {
				other := e.newPod("commit-warm")
				e.add(conf, other)
				e.del(conf, other)
			}
			p := e.newPod("commit-fails")
			out, err := e.run("ADD", conf, p, "PODNET_FAULT_COMMIT=no space left on device")
			if !cni.IsCode(err, cni.CodeIOFailure) || !strings.Contains(err.Error(), "no space left on device") {
				t.Fatalf("ADD whose commit failed: code %d: %v (output %s)", cni.CodeOf(err), err, out)
			}
			// In use, the allocation itself succeeded: the failure is the
			// one ADD's final wait reports.
			if fromWait := strings.Contains(err.Error(), "podnet-ipam: bolt store"); fromWait != warm {
				t.Errorf("failure reported by the final wait: %v, want %v: %v", fromWait, warm, err)
			}
			e.requireClean()
			boltClean(t, db)
			// Without the fault the same pod comes up, and goes.
			e.add(conf, p)
			e.del(conf, p)
			e.requireClean()
		})
	}
}

// boltClean checks the bbolt IPAM store at db: no allocation of any pod
// (and so no endpoint) is left, only bridge gateways, which stay with the
// node, and the store is consistent.
func boltClean(t *testing.T, db string) {
	t.Helper()
	st, err := bolt.Open(context.Background(), bolt.Options{Path: db})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rep, err := ipam.New(st, ipam.Config{}).Check(context.Background(), ipam.CheckOptions{Live: func(_, h string) bool { return strings.Contains(h, ".gateway.") }})
	if err != nil || !rep.Clean() {
		t.Fatalf("store: %+v %v", rep, err)
	}
}

// TestInProcessKilledDuringAdd kills the plugin at each step of ADD with
// the in-process IPAM, whose commit may be under way at the later steps
// (it syncs while the pod is wired). The bbolt file must stay usable, and
// the runtime's DEL, or a retried ADD and its DEL, must leave nothing.
func TestInProcessKilledDuringAdd(t *testing.T) {
	for _, step := range addSteps {
		t.Run(step, func(t *testing.T) {
			e := newEnv(t, true)
			db := filepath.Join(t.TempDir(), "ipam.db")
			conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"pnipam","type":"podnet","ipMasq":true,
				"ipam":{"type":"podnet-ipam","store":"bolt:%s","node":"node1","pools":[{"name":"p4","cidr":"10.107.0.0/16"}]}}`, db)
			warm := e.newPod("warm")
			e.add(conf, warm) // the store exists: the ADD below commits once
			p := e.newPod("killed")
			if _, err := e.run("ADD", conf, p, "PODNET_FAULT_AT="+step); err == nil {
				t.Fatal("ADD survived its kill")
			}
			e.del(conf, p)
			q := e.newPod("killed-retried")
			if _, err := e.run("ADD", conf, q, "PODNET_FAULT_AT="+step); err == nil {
				t.Fatal("ADD survived its kill")
			}
			e.add(conf, q)
			e.del(conf, q)
			e.del(conf, warm)
			e.requireClean()
			boltClean(t, db)
		})
	}
}

// TestDelWithConfigThatNoLongerValidates: the configuration was edited
// after the ADD into one podnet refuses (a mode it does not know, a pool
// that cannot be cut into blocks). DEL still removes everything the
// attachment made, found by its names and owner tags, releases the
// addresses, and succeeds; again when repeated.
func TestDelWithConfigThatNoLongerValidates(t *testing.T) {
	e := newEnv(t, false)
	db := filepath.Join(t.TempDir(), "ipam.db")
	conf := func(mode, pool string) string {
		return fmt.Sprintf(`{"cniVersion":"1.1.0","name":"pnipam","type":"podnet","mode":%q,"ipMasq":true,
			"capabilities":{"portMappings":true},"runtimeConfig":{"portMappings":[{"hostPort":18121,"containerPort":80,"protocol":"tcp"}]},
			"ipam":{"type":"podnet-ipam","store":"bolt:%s","node":"node1","pools":[{"name":"p4","cidr":%q}]}}`, mode, db, pool)
	}
	p := e.newPod("edited")
	e.add(conf("routed", "10.107.0.0/16"), p)
	broken := conf("tunnel", "10.107.0.0/30")
	if _, err := e.run("ADD", broken, e.newPod("refused")); err == nil {
		t.Fatal("ADD accepted the broken configuration")
	}
	for i := range 2 {
		if _, err := e.run("DEL", broken, p); err != nil {
			t.Fatalf("DEL %d with the edited configuration: %v", i+1, err)
		}
	}
	e.requireClean()
	boltClean(t, db)
}

// TestDelOnStoreThatDoesNotExist: a DEL on a fresh host, or after the
// store was removed, finds nothing allocated and succeeds without
// creating the store; the first ADD creates its directory.
func TestDelOnStoreThatDoesNotExist(t *testing.T) {
	e := newEnv(t, false)
	dir := filepath.Join(t.TempDir(), "var", "lib", "podnet")
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"pnipam","type":"podnet","ipMasq":true,
		"ipam":{"type":"podnet-ipam","store":"bolt:%s/ipam.db","node":"node1","pools":[{"name":"p4","cidr":"10.107.0.0/16"}]}}`, dir)
	p := e.newPod("nostore")
	if _, err := e.run("DEL", conf, p); err != nil {
		t.Fatalf("DEL on a store that does not exist: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("DEL created the store's directory: %v", err)
	}
	e.add(conf, p)
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("store directory after ADD: %v %v, want 0700", fi, err)
	}
	e.del(conf, p)
	e.requireClean()
	boltClean(t, filepath.Join(dir, "ipam.db"))
}
