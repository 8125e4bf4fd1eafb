// Command dnsquery resolves names the way a Go program in a pod does, with
// the pure-Go resolver (built with CGO_ENABLED=0, it reads the pod's
// /etc/resolv.conf: nameservers, search path, ndots), and prints one JSON
// line per query for a test to read from the pod's log. It is the whole
// of the harness's DNS client image, since the nodes pull nothing.
//
//	dnsquery [-resolv-conf] [-timeout D] QUERY...
//
// A QUERY is a name, looked up as a host (A and AAAA), or ptr:ADDRESS,
// looked up by address. -resolv-conf prints the pod's resolv.conf first.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// result is one query's line.
type result struct {
	Query   string   `json:"query"`
	Answers []string `json:"answers,omitempty"`
	// Error is the lookup's error; NotFound says the name does not exist
	// (NXDOMAIN for every name the search path tried).
	Error    string `json:"error,omitempty"`
	NotFound bool   `json:"notFound,omitempty"`
}

func main() {
	resolvConf := flag.Bool("resolv-conf", false, "print /etc/resolv.conf first")
	timeout := flag.Duration("timeout", 10*time.Second, "for each query")
	flag.Parse()
	out := json.NewEncoder(os.Stdout)
	if *resolvConf {
		data, err := os.ReadFile("/etc/resolv.conf")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		out.Encode(map[string]string{"resolvConf": string(data)})
	}
	r := &net.Resolver{PreferGo: true}
	for _, q := range flag.Args() {
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		res := result{Query: q}
		var err error
		if addr, ok := strings.CutPrefix(q, "ptr:"); ok {
			res.Answers, err = r.LookupAddr(ctx, addr)
		} else {
			res.Answers, err = r.LookupHost(ctx, q)
		}
		cancel()
		if err != nil {
			res.Error = err.Error()
			var dnsErr *net.DNSError
			res.NotFound = errors.As(err, &dnsErr) && dnsErr.IsNotFound
		}
		out.Encode(res)
	}
}
