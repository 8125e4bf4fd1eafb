package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"
)

// newDiagCommand holds small network diagnostics meant to run inside a
// pod (`podnet run -- podnet diag serve`), so that checking pod
// connectivity needs no tools beyond podnet itself.
func newDiagCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "diag", Short: "Connectivity diagnostics to run inside pods"}
	serve := newDiagServeCommand()
	var timeout, retryFor time.Duration
	var output string
	get := &cobra.Command{
		Use:   "get URL",
		Short: "Fetch a URL over HTTP and print the body",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// A check that races something else's setup (a Service's
			// rules, a route) retries until --retry-for has passed.
			deadline := time.Now().Add(retryFor)
			for {
				var body bytes.Buffer
				w := io.Writer(&body)
				if output == outputText {
					w = cmd.OutOrStdout()
				}
				err := fetch(w, args[0], timeout)
				if err == nil && output == outputJSON {
					return writeJSON(cmd.OutOrStdout(), getReport{URL: args[0], Body: body.String()})
				}
				if err == nil || !time.Now().Before(deadline) {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "podnet diag: %v; retrying\n", err)
				time.Sleep(500 * time.Millisecond)
			}
		},
	}
	get.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "give up on one attempt after this long")
	get.Flags().DurationVar(&retryFor, "retry-for", 0, "retry a failed fetch until this long has passed")
	addOutputFlag(get, &output, outputText, outputJSON)
	cmd.AddCommand(serve, get, newDiagProbeCommand())
	return cmd
}

// getReport is `diag get -o json`: the URL and the body of its 200
// answer (anything else is an error).
type getReport struct {
	URL  string `json:"url"`
	Body string `json:"body"`
}

// fetch GETs url and copies a 200 answer's body to w.
func fetch(w io.Writer, url string, timeout time.Duration) error {
	client := &http.Client{Timeout: timeout}
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}

func localAddrs() []string {
	var out []string
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && !ipn.IP.IsLinkLocalUnicast() {
			out = append(out, ipn.IP.String())
		}
	}
	return out
}

func newDiagServeCommand() *cobra.Command {
	var listen, udp string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve HTTP, answering with the addresses of this network namespace",
		Long: `Serve HTTP, answering with the addresses of this network namespace and
the peer's; GET /peer answers {"peer":"ADDRESS:PORT"}, the address the
server saw the request come from (podnet connectivity test's no-SNAT
check). With --udp, a UDP socket answers each datagram with the same.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			if udp != "" {
				pc, err := net.ListenPacket("udp", udp)
				if err != nil {
					return err
				}
				defer pc.Close()
				go serveUDP(pc)
			}
			srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/peer" {
					_ = json.NewEncoder(w).Encode(peerAnswer{Peer: r.RemoteAddr})
					return
				}
				fmt.Fprintf(w, "hello from %s (pod addresses %v) to %s\n", hostname(), localAddrs(), r.RemoteAddr)
			})}
			go func() {
				<-cmd.Context().Done()
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				_ = srv.Shutdown(ctx)
			}()
			fmt.Fprintf(cmd.ErrOrStderr(), "podnet diag: serving on %s\n", ln.Addr())
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&listen, "listen", ":8080", "address to listen on")
	cmd.Flags().StringVar(&udp, "udp", "", "also answer UDP on this address with the peer's address")
	return cmd
}
