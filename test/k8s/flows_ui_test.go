package k8s_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podnet/podnet/flows"
	"github.com/podnet/podnet/netns"
)

// uiListen is where TestFlows's `podnet ui` serves, in node 1's network
// namespace.
const uiListen = "127.0.0.1:7380"

// ui runs the real `podnet ui --kubeconfig` on node 1 (every agent read
// through the API server's pod proxy) and asks its /api/flows, as the
// page does, for the guard's drop the script made: the page's source is
// the cluster's agents, not only --agent URLs (test/k8s/uibrowser judges
// the page itself in a browser).
func (w *flowWorld) ui(ctx context.Context, t *testing.T) {
	t.Helper()
	uctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	n := w.c.Nodes[0]
	cmd := n.PodnetCommand(uctx, "ui", "--kubeconfig", w.kc, "--listen", uiListen)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		if err := cmd.Wait(); err != nil {
			t.Errorf("podnet ui after SIGINT: %v: %s", err, out.String())
		}
	}()
	var recs []flows.Record
	waitUntil(ctx, t, "podnet ui's /api/flows answers with the guard's drop", time.Minute, func() (err error) {
		recs, err = uiFlows(n.NetNS, "/api/flows?verdict=dropped-guard&limit=10")
		if err == nil && len(recs) == 0 {
			err = fmt.Errorf("no record")
		}
		return err
	})
	for i, r := range recs {
		if r.Verdict != flows.DroppedGuard {
			t.Errorf("podnet ui /api/flows?verdict=dropped-guard: %+v", r)
		}
		if i < 3 {
			t.Logf("podnet ui /api/flows?verdict=dropped-guard: %s", describeRecord(r))
		}
	}
	t.Logf("podnet ui --kubeconfig: %d dropped-guard records through /api/flows (%s)", len(recs), strings.TrimSpace(out.String()))
}

// uiFlows GETs path from the ui in the node namespace at nsPath: the
// connection made inside it (an HTTP client would dial from another
// thread), the answer read outside.
func uiFlows(nsPath, path string) ([]flows.Record, error) {
	var conn net.Conn
	err := netns.Do(nsPath, func() (err error) {
		conn, err = net.DialTimeout("tcp4", uiListen, 2*time.Second)
		return err
	})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, uiListen); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", path, resp.Status)
	}
	var recs []flows.Record
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r flows.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s: %v: %s", path, err, sc.Bytes())
		}
		recs = append(recs, r)
	}
	return recs, sc.Err()
}
