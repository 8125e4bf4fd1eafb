// Command server is the etcd server podnet's tests run as a process of
// its own: etcd's own entry point (go.etcd.io/etcd/server/v3/etcdmain,
// every flag of the etcd binary), built from this module so that the
// etcd server stays out of podnet's module graph. Two environment
// variables serve the tests that start it:
//
//   - PODNET_ETCD_READY_URL: an http URL (the member's --listen-metrics-urls
//     plus /health) polled until it answers 200; then "ready" is written
//     to stdout, which the test waits for, inside whatever network
//     namespace the member was started in.
//   - PODNET_ETCD_STDIN_LIFETIME=1: the process exits when its stdin
//     closes, which happens when the test that holds the pipe ends, even
//     by a crash, so no member outlives its test.
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	if os.Getenv("PODNET_ETCD_STDIN_LIFETIME") == "1" {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			os.Exit(0)
		}()
	}
	if u := os.Getenv("PODNET_ETCD_READY_URL"); u != "" {
		go sayReady(u)
	}
	etcdmain.Main(os.Args)
}

func sayReady(u string) {
	c := &http.Client{Timeout: time.Second}
	for {
		resp, err := c.Get(u)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				fmt.Println("ready")
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}
