package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/internal/testutil"
)

func TestPluginBinary(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.BuildBinary(t, "./plugins/podnet-ipam", t.TempDir())
	_, nsPath := testutil.NewNetNS(t)
	db := filepath.Join(t.TempDir(), "ipam.db")
	conf := func(store string) string {
		return fmt.Sprintf(`{"cniVersion":"1.1.0","name":"n1","type":"bridge","ipam":{"type":"podnet-ipam","store":%q,"node":"node1","resultPrefix":"pool","pools":[{"name":"p","cidr":"10.110.0.0/16"}]}}`, store)
	}
	run := func(verb, stdin string) ([]byte, error) {
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), "CNI_COMMAND="+verb, "CNI_CONTAINERID=c1", "CNI_NETNS="+nsPath, "CNI_IFNAME=eth0",
			"CNI_PATH=/nonexistent", "CNI_ARGS=K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web")
		cmd.Stdin = strings.NewReader(stdin)
		var out bytes.Buffer
		cmd.Stdout = &out
		err := cmd.Run()
		if err != nil {
			var e cni.Error
			if json.Unmarshal(out.Bytes(), &e) == nil && e.Code != 0 {
				return nil, &e
			}
		}
		return out.Bytes(), err
	}
	out, err := run("ADD", conf("bolt:"+db))
	if err != nil {
		t.Fatal(err)
	}
	res, err := cni.ParseResult(out)
	if err != nil || len(res.IPs) != 1 || res.IPs[0].Address.Bits() != 16 || !res.IPs[0].Gateway.IsValid() {
		t.Fatalf("ADD result %s %v", out, err)
	}
	again, err := run("ADD", conf("bolt:"+db))
	if err != nil || !bytes.Equal(bytes.TrimSpace(again), bytes.TrimSpace(out)) {
		t.Errorf("repeated ADD: %s %v", again, err)
	}
	for range 2 {
		if _, err := run("DEL", conf("bolt:"+db)); err != nil {
			t.Fatalf("DEL: %v", err)
		}
	}
	if out, err := run("VERSION", `{"cniVersion":"1.1.0"}`); err != nil || !strings.Contains(string(out), `"1.1.0"`) {
		t.Errorf("VERSION: %s %v", out, err)
	}
	// Port 1 on loopback refuses: an etcd that is down is "try again later".
	_, err = run("ADD", conf("etcd://127.0.0.1:1"))
	if cni.CodeOf(err) != cni.CodeTryAgainLater {
		t.Errorf("ADD with etcd down: %v", err)
	}
}
