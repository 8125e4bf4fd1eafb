package main

import (
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/netns"
)

// TestInProcessHostPorts: with the portMappings capability, podnet
// publishes the pod's host ports itself: the pod answers on the node
// address and on 127.0.0.1, CHECK sees the mapping, and DEL (and GC)
// leave no element behind.
func TestInProcessHostPorts(t *testing.T) {
	e := newEnv(t, false)
	conf := e.conf(`"capabilities":{"portMappings":true},"runtimeConfig":{"portMappings":[{"hostPort":18095,"containerPort":8095,"protocol":"tcp"}]}`)
	a := e.newPod("hp-a")
	e.add(conf, a)

	var ln net.Listener
	if err := netns.Do(a.ns, func() (err error) { ln, err = net.Listen("tcp", ":8095"); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("pod"))
			c.Close()
		}
	}()
	for _, target := range []string{"127.0.0.1:18095", nodeAddr + ":18095"} {
		err := netns.Do(e.host, func() error {
			c, err := net.DialTimeout("tcp", target, 3*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(3 * time.Second))
			b := make([]byte, 3)
			if _, err := c.Read(b); err != nil || string(b) != "pod" {
				return fmt.Errorf("read %q: %v", b, err)
			}
			return nil
		})
		if err != nil {
			t.Errorf("host -> %s -> pod: %v", target, err)
		}
	}
	if _, err := e.run("CHECK", withPrev(conf, a.res), a); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	if n := portElements(t, e.host, a.id); n == 0 {
		t.Fatal("no host port element for the pod")
	}
	e.del(conf, a)
	if n := portElements(t, e.host, a.id); n != 0 {
		t.Errorf("%d host port elements left after DEL", n)
	}
	e.requireClean()
}

// portElements counts the host-port map elements owned by containerID.
func portElements(t *testing.T, host, containerID string) int {
	t.Helper()
	var out []byte
	err := netns.Do(host, func() error {
		var err error
		out, err = exec.Command("nft", "list", "table", "inet", "podnet-portmap").CombinedOutput()
		if err != nil && strings.Contains(string(out), "No such file or directory") {
			out = nil // no table: no elements
			return nil
		}
		if err != nil {
			return fmt.Errorf("nft list table: %v: %s", err, out)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(out), containerID)
}

// TestHostPortsSweptWithoutMappings: a DEL that does not carry the
// mappings of ADD (a runtime that lost them) still removes the pod's host
// ports; one that carries an empty list had none to remove.
func TestHostPortsSweptWithoutMappings(t *testing.T) {
	e := newEnv(t, false)
	withPorts := e.conf(`"capabilities":{"portMappings":true},"runtimeConfig":{"portMappings":[{"hostPort":18096,"containerPort":8096,"protocol":"tcp"}]}`)
	bare := e.conf(`"capabilities":{"portMappings":true}`)
	a := e.newPod("hp-sweep")
	e.add(withPorts, a)
	if portElements(t, e.host, a.id) == 0 {
		t.Fatal("no host port element for the pod")
	}
	e.del(bare, a)
	if n := portElements(t, e.host, a.id); n != 0 {
		t.Errorf("%d host port elements left after a DEL without mappings", n)
	}
	e.requireClean()
}

// TestDelBatchLosesRace: DEL removes the masquerade entry and the host
// ports in one nftables batch, which fails whole when an element goes
// away between the listing and the commit (here another writer flushes
// the masquerade set at that moment). DEL then removes each part the
// tolerant way and still leaves nothing.
func TestDelBatchLosesRace(t *testing.T) {
	nft, err := exec.LookPath("nft")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, true)
	conf := e.conf(`"ipMasq":true,"capabilities":{"portMappings":true},"runtimeConfig":{"portMappings":[{"hostPort":18097,"containerPort":8097,"protocol":"udp"}]}`)
	a := e.newPod("hp-race")
	e.add(conf, a)
	if portElements(t, e.host, a.id) == 0 || e.leftovers().elems != 2 {
		t.Fatalf("after ADD: %d host port elements, %+v", portElements(t, e.host, a.id), e.leftovers())
	}
	_, err = e.run("DEL", withPrev(conf, a.res), a,
		"PODNET_FAULT_EXEC_AT="+stepDelQueued,
		"PODNET_FAULT_EXEC="+nft+" flush set inet "+dataplane.MasqTableName+" pods4-testnet")
	if err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if n := portElements(t, e.host, a.id); n != 0 {
		t.Errorf("%d host port elements left after DEL", n)
	}
	e.requireClean()
}
