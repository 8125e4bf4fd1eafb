package interop

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podnet/podnet/cni"
)

// TestPluginInput records what every plugin of a chain receives from
// each library, verb by verb, and compares: the configuration on stdin
// (name, cniVersion, prevResult, runtimeConfig filtered by capabilities,
// GC's valid attachments) and the CNI_* environment. It needs no root:
// the noop plugin touches no namespace.
func TestPluginInput(t *testing.T) {
	path := []string{noopBinDir(t)}
	const conf = `{"cniVersion":"%VERSION%","name":"pnio-input","plugins":[
  {"type":"noop1","record":"%REC%","capabilities":{"portMappings":true,"bandwidth":false}},
  {"type":"noop2","record":"%REC%","capabilities":{"bandwidth":true,"ipRanges":true},"nested":{"k":[1,"two",null]}},
  {"type":"noop3","record":"%REC%"}]}`
	for _, v := range append([]string{"0.3.0"}, versions...) {
		t.Run(v, func(t *testing.T) {
			a := attachment{
				ContainerID: "pnio-input-ctr",
				NetNS:       "/proc/self/ns/net", // noop never enters it
				IfName:      "eth0",
				Args:        [][2]string{{"IgnoreUnknown", "true"}, {"K8S_POD_NAMESPACE", "ns1"}, {"K8S_POD_NAME", "pod-1"}},
				CapArgs: map[string]any{
					"portMappings": []any{map[string]any{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}},
					"bandwidth":    map[string]any{"ingressRate": 1000, "ingressBurst": 100},
					"notDeclared":  "nobody asked for this",
				},
			}
			var calls [2][]string
			for i, mk := range bothLibraries {
				dir := t.TempDir()
				rec := filepath.Join(dir, "record.jsonl")
				r := mk(path, filepath.Join(dir, "cache"), nil)
				c := []byte(strings.NewReplacer("%VERSION%", v, "%REC%", rec).Replace(conf))
				ctx := context.Background()
				if _, err := r.add(ctx, c, a); err != nil {
					t.Fatalf("%v ADD: %v", r, err)
				}
				if cni.AtLeast(v, "0.4.0") {
					if err := r.check(ctx, c, a); err != nil {
						t.Fatalf("%v CHECK: %v", r, err)
					}
				}
				if err := r.status(ctx, c); err != nil {
					t.Fatalf("%v STATUS: %v", r, err)
				}
				if err := r.gc(ctx, c, []attachment{a}); err != nil {
					t.Fatalf("%v GC: %v", r, err)
				}
				if err := r.del(ctx, c, a); err != nil {
					t.Fatalf("%v DEL: %v", r, err)
				}
				for _, call := range readRecord(t, rec) {
					calls[i] = append(calls[i], describeCall(t, call, rec))
				}
			}
			for i := range max(len(calls[0]), len(calls[1])) {
				var p, l string
				if i < len(calls[0]) {
					p = calls[0][i]
				}
				if i < len(calls[1]) {
					l = calls[1][i]
				}
				if p != l {
					t.Errorf("call #%d differs:\n  podnet: %s\n  libcni: %s", i+1, p, l)
				}
			}
		})
	}
}

// describeCall renders a recorded call for comparison: verb, non-empty
// CNI_* variables and the configuration, normalized like results are.
func describeCall(t *testing.T, c recorded, rec string) string {
	t.Helper()
	var env []string
	for _, k := range []string{"CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS", "CNI_PATH"} {
		if v := c.Env[k]; v != "" {
			env = append(env, k+"="+v)
		}
	}
	for k := range c.Env {
		if !strings.Contains("CNI_COMMAND CNI_CONTAINERID CNI_NETNS CNI_IFNAME CNI_ARGS CNI_PATH", k) {
			env = append(env, k+"="+c.Env[k]+" (unexpected)")
		}
	}
	var stdin map[string]any
	if err := json.Unmarshal(c.Stdin, &stdin); err != nil {
		t.Fatalf("recorded stdin is not an object: %s", c.Stdin)
	}
	norm := newNormalizer(nil, rec, "REC")
	return fmt.Sprintf("%s %v %s", c.Command, env, strings.Join(strings.Fields(norm.json(t, mustJSON(stdin))), ""))
}
